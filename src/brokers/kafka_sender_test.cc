#include "brokers/kafka_sender.h"

#include <gtest/gtest.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <chrono>
#include <map>
#include <optional>
#include <thread>

namespace delayd::brokers {
namespace {

using delivery::OutRequest;
using delivery::OutResult;
using namespace std::chrono_literals;

constexpr int16_t kProduceApi = 0;  // Kafka's ApiKey for Produce

struct Consumed {
  std::string key, value;
  int32_t partition = -1;
  std::map<std::string, std::string> headers;
};

class KafkaSenderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A mock cluster of three brokers in this process, on loopback ports:
    // the Kafka protocol on real sockets (librdkafka's rdkafka_mock.h).
    char err[512];
    rd_kafka_conf_t* conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "log_level", "3", err, sizeof err);
    mock_rk_ = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    ASSERT_NE(mock_rk_, nullptr) << err;
    cluster_ = rd_kafka_mock_cluster_new(mock_rk_, 3);
    ASSERT_NE(cluster_, nullptr);
    bootstrap_ = rd_kafka_mock_cluster_bootstraps(cluster_);
    ASSERT_EQ(rd_kafka_mock_topic_create(cluster_, "orders", 4, 3), RD_KAFKA_RESP_ERR_NO_ERROR);
    NewSender();
  }
  void TearDown() override {
    sender_.reset();
    if (cluster_ != nullptr) rd_kafka_mock_cluster_destroy(cluster_);
    if (mock_rk_ != nullptr) rd_kafka_destroy(mock_rk_);
  }
  void NewSender() {
    sender_ = std::make_unique<KafkaSender>(
        [this](std::function<void()> f) { boost::asio::post(io_, std::move(f)); }, policy_, clock_);
  }
  std::string url(const std::string& topic = "orders") const {
    return "kafka://" + bootstrap_ + "/" + topic;
  }
  OutRequest Request(uint64_t id, std::string key, std::string body) {
    OutRequest r;
    r.url = url();
    r.body = std::move(body);
    r.timeout_ms = 5000;
    r.headers = {"Delayd-Job-Id: " + std::to_string(id), "Delayd-Attempt: 1",
                 "Content-Type: application/octet-stream", "X-Tenant: acme"};
    r.job = {.id = id, .topic = "orders", .key = std::move(key), .attempt = 1};
    return r;
  }
  // Sends `r` and runs the loop until its result comes (20 s at most).
  std::optional<OutResult> SendAndWait(OutRequest r) {
    std::optional<OutResult> result;
    sender_->Send(std::move(r), [&](OutResult got) { result = std::move(got); });
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (!result && std::chrono::steady_clock::now() < deadline) {
      io_.restart();
      io_.run_for(10ms);
    }
    return result;
  }
  // Every record of `topic` from the start, once `n` are there (`wait` at most).
  std::vector<Consumed> Consume(const std::string& topic, size_t n,
                                std::chrono::milliseconds wait = 20s) {
    char err[512];
    rd_kafka_conf_t* conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap_.c_str(), err, sizeof err);
    rd_kafka_conf_set(conf, "group.id", "kafka-sender-test", err, sizeof err);
    rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
    EXPECT_NE(rk, nullptr) << err;
    if (rk == nullptr) return {};
    rd_kafka_topic_partition_list_t* parts = rd_kafka_topic_partition_list_new(4);
    for (int32_t p = 0; p < 4; ++p) {
      rd_kafka_topic_partition_list_add(parts, topic.c_str(), p)->offset =
          RD_KAFKA_OFFSET_BEGINNING;
    }
    rd_kafka_assign(rk, parts);
    rd_kafka_topic_partition_list_destroy(parts);
    std::vector<Consumed> out;
    const auto deadline = std::chrono::steady_clock::now() + wait;
    while (out.size() < n && std::chrono::steady_clock::now() < deadline) {
      rd_kafka_message_t* m = rd_kafka_consumer_poll(rk, 100);
      if (m == nullptr) continue;
      if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        Consumed c;
        c.key.assign(static_cast<const char*>(m->key), m->key_len);
        c.value.assign(static_cast<const char*>(m->payload), m->len);
        c.partition = m->partition;
        rd_kafka_headers_t* hdrs = nullptr;
        if (rd_kafka_message_headers(m, &hdrs) == RD_KAFKA_RESP_ERR_NO_ERROR) {
          const char* name;
          const void* value;
          size_t size;
          for (size_t i = 0;
               rd_kafka_header_get_all(hdrs, i, &name, &value, &size) == RD_KAFKA_RESP_ERR_NO_ERROR;
               ++i) {
            c.headers[name] = std::string(static_cast<const char*>(value), size);
          }
        }
        out.push_back(std::move(c));
      }
      rd_kafka_message_destroy(m);
    }
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    return out;
  }

  boost::asio::io_context io_;
  SystemClock clock_;
  delivery::TargetPolicy policy_;
  rd_kafka_t* mock_rk_ = nullptr;
  rd_kafka_mock_cluster_t* cluster_ = nullptr;
  std::string bootstrap_;
  std::unique_ptr<KafkaSender> sender_;
};

TEST_F(KafkaSenderTest, ProducesEachJobWithItsKeyBodyAndHeadersThroughOneProducer) {
  std::string all;
  for (int i = 0; i < 256; ++i) all += static_cast<char>(i);
  for (auto [id, key] :
       {std::pair<uint64_t, std::string>{1, "order-8812"}, {2, ""}, {3, "order-8812"}}) {
    auto r = SendAndWait(Request(id, key, all + std::to_string(id)));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->broker, OutResult::Broker::kAcknowledged) << r->error;
    EXPECT_TRUE(r->error.empty()) << r->error;
  }
  EXPECT_EQ(sender_->producers(), 1u) << "one producer per cluster, reused";
  std::vector<Consumed> got = Consume("orders", 3);
  ASSERT_EQ(got.size(), 3u);
  std::map<std::string, std::vector<Consumed>> by_key;
  for (Consumed& c : got) by_key[c.key].push_back(std::move(c));
  ASSERT_EQ(by_key["order-8812"].size(), 2u) << "the job's key is the record's key";
  ASSERT_EQ(by_key["2"].size(), 1u) << "a job without a key goes under its id";
  EXPECT_EQ(by_key["order-8812"][0].partition, by_key["order-8812"][1].partition)
      << "one key, one partition";
  const Consumed& two = by_key["2"][0];
  EXPECT_EQ(two.value, all + "2") << "the body byte for byte";
  EXPECT_EQ(two.headers.at("Delayd-Job-Id"), "2");
  EXPECT_EQ(two.headers.at("Delayd-Attempt"), "1");
  EXPECT_EQ(two.headers.at("X-Tenant"), "acme");
  EXPECT_EQ(two.headers.at("Content-Type"), "application/octet-stream");
}

TEST_F(KafkaSenderTest, ARecordTheClusterRefusesIsRejectedWithTheBrokersError) {
  rd_kafka_mock_push_request_errors(cluster_, kProduceApi, 1, RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE);
  auto r = SendAndWait(Request(1, "k", "x"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->broker, OutResult::Broker::kRejected) << r->error;
  EXPECT_EQ(r->error.rfind("MSG_SIZE_TOO_LARGE: ", 0), 0u) << r->error;
}

TEST_F(KafkaSenderTest, AnErrorTheProducerRetriesEndsAcknowledgedAndOnce) {
  rd_kafka_mock_push_request_errors(cluster_, kProduceApi, 2, RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS,
                                    RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS);
  auto r = SendAndWait(Request(7, "k7", "once"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->broker, OutResult::Broker::kAcknowledged) << r->error;
  std::vector<Consumed> got = Consume("orders", 2, 3s);  // waits 3 s for a second
  ASSERT_EQ(got.size(), 1u) << "the idempotent producer wrote it once";
  EXPECT_EQ(got[0].value, "once");
}

TEST_F(KafkaSenderTest, AnUnknownTopicIsRejected) {
  // The mock cluster would make any topic asked for; a real one with
  // auto-creation off answers this.
  rd_kafka_mock_topic_set_error(cluster_, "no-such-topic", RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART);
  OutRequest req = Request(1, "k", "x");
  req.url = url("no-such-topic");
  auto r = SendAndWait(std::move(req));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->broker, OutResult::Broker::kRejected) << r->error;
  EXPECT_NE(r->error.find("UNKNOWN_TOPIC"), std::string::npos) << r->error;
}

TEST_F(KafkaSenderTest, ABrokerThePolicyRefusesIsNeverConnectedTo) {
  policy_ = delivery::TargetPolicy::Make({}, {"127.0.0.0/8"}).value();
  OutRequest req = Request(1, "k", "x");
  req.timeout_ms = 1000;
  auto r = SendAndWait(std::move(req));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->broker, OutResult::Broker::kFailed) << "retried, as a refused HTTP connection is";
  EXPECT_EQ(r->error.rfind("refused by the target policy", 0), 0u) << r->error;
  policy_ = delivery::TargetPolicy();
  EXPECT_TRUE(Consume("orders", 1, 2s).empty());
}

TEST_F(KafkaSenderTest, ABadUrlIsNotSent) {
  OutRequest req = Request(1, "k", "x");
  req.url = "kafka://" + bootstrap_ + "/bad topic";
  auto r = SendAndWait(std::move(req));
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->not_sent);
  EXPECT_EQ(sender_->producers(), 0u);
}

TEST_F(KafkaSenderTest, StopDropsRecordsInFlightAndRunsNoCallbackAfter) {
  rd_kafka_mock_broker_set_down(cluster_, 1);
  rd_kafka_mock_broker_set_down(cluster_, 2);
  rd_kafka_mock_broker_set_down(cluster_, 3);
  bool called = false;
  sender_->Send(Request(1, "k", "x"), [&](OutResult) { called = true; });
  const auto start = std::chrono::steady_clock::now();
  sender_->Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  io_.restart();
  io_.poll();
  EXPECT_FALSE(called);
  sender_->Send(Request(2, "k", "y"), [&](OutResult) { called = true; });  // dropped
  io_.restart();
  io_.poll();
  EXPECT_FALSE(called);
}

}  // namespace
}  // namespace delayd::brokers
