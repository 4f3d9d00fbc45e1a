#include "brokers/kafka_sender.h"

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <chrono>
#include <map>
#include <optional>
#include <thread>

#include "support/mock_kafka.h"

namespace delayd::brokers {
namespace {

using delivery::OutRequest;
using delivery::OutResult;
using namespace std::chrono_literals;

constexpr int16_t kProduceApi = 0;  // Kafka's ApiKey for Produce

class KafkaSenderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    kafka_.CreateTopic("orders");
    NewSender();
  }
  void TearDown() override { sender_.reset(); }
  void NewSender() {
    sender_ = std::make_unique<KafkaSender>(
        [this](std::function<void()> f) { boost::asio::post(io_, std::move(f)); }, policy_, clock_);
  }
  std::string url(const std::string& topic = "orders") const { return kafka_.url(topic); }
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
  boost::asio::io_context io_;
  SystemClock clock_;
  delivery::TargetPolicy policy_;
  testing::MockKafka kafka_;
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
  std::vector<testing::KafkaRecord> got = kafka_.Consume("orders", 3, 20s);
  ASSERT_EQ(got.size(), 3u);
  std::map<std::string, std::vector<testing::KafkaRecord>> by_key;
  for (testing::KafkaRecord& c : got) by_key[c.key].push_back(std::move(c));
  ASSERT_EQ(by_key["order-8812"].size(), 2u) << "the job's key is the record's key";
  ASSERT_EQ(by_key["2"].size(), 1u) << "a job without a key goes under its id";
  EXPECT_EQ(by_key["order-8812"][0].partition, by_key["order-8812"][1].partition)
      << "one key, one partition";
  const testing::KafkaRecord& two = by_key["2"][0];
  EXPECT_EQ(two.value, all + "2") << "the body byte for byte";
  EXPECT_EQ(two.headers.at("Delayd-Job-Id"), "2");
  EXPECT_EQ(two.headers.at("Delayd-Attempt"), "1");
  EXPECT_EQ(two.headers.at("X-Tenant"), "acme");
  EXPECT_EQ(two.headers.at("Content-Type"), "application/octet-stream");
}

TEST_F(KafkaSenderTest, ARecordTheClusterRefusesIsRejectedWithTheBrokersError) {
  rd_kafka_mock_push_request_errors(kafka_.cluster(), kProduceApi, 1,
                                    RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE);
  auto r = SendAndWait(Request(1, "k", "x"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->broker, OutResult::Broker::kRejected) << r->error;
  EXPECT_EQ(r->error.rfind("MSG_SIZE_TOO_LARGE: ", 0), 0u) << r->error;
}

TEST_F(KafkaSenderTest, AnErrorTheProducerRetriesEndsAcknowledgedAndOnce) {
  rd_kafka_mock_push_request_errors(kafka_.cluster(), kProduceApi, 2,
                                    RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS,
                                    RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS);
  auto r = SendAndWait(Request(7, "k7", "once"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->broker, OutResult::Broker::kAcknowledged) << r->error;
  std::vector<testing::KafkaRecord> got =
      kafka_.Consume("orders", 2, 3s);  // waits 3 s for a second
  ASSERT_EQ(got.size(), 1u) << "the idempotent producer wrote it once";
  EXPECT_EQ(got[0].value, "once");
}

TEST_F(KafkaSenderTest, AProducerWithAFatalErrorIsReplacedAndTheNextRecordLands) {
  auto first = SendAndWait(Request(1, "k1", "before"));
  ASSERT_TRUE(first);
  ASSERT_EQ(first->broker, OutResult::Broker::kAcknowledged) << first->error;
  // From here on that producer fails every record (librdkafka's __FATAL).
  sender_->FailProducersForTest();
  auto next = SendAndWait(Request(2, "k2", "after"));
  ASSERT_TRUE(next);
  EXPECT_EQ(next->broker, OutResult::Broker::kAcknowledged) << next->error;
  EXPECT_EQ(sender_->producers(), 1u) << "replaced, not added";
  std::vector<testing::KafkaRecord> got = kafka_.Consume("orders", 2, 10s);
  ASSERT_EQ(got.size(), 2u);
}

TEST_F(KafkaSenderTest, AnUnknownTopicIsRejected) {
  // The mock cluster would make any topic asked for; a real one with
  // auto-creation off answers this.
  rd_kafka_mock_topic_set_error(kafka_.cluster(), "no-such-topic",
                                RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART);
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
  // The policy stays as it is: the producer's broker threads go on trying
  // (and being refused) while the test's own consumer looks.
  EXPECT_TRUE(kafka_.Consume("orders", 1, 2s).empty());
}

// Sent twice: the second answer comes from the parsed URLs the sender
// keeps, and still says why.
TEST_F(KafkaSenderTest, ABadUrlIsNotSent) {
  for (int i = 0; i < 2; ++i) {
    OutRequest req = Request(1, "k", "x");
    req.url = "kafka://" + kafka_.bootstrap() + "/bad topic";
    auto r = SendAndWait(std::move(req));
    ASSERT_TRUE(r);
    EXPECT_TRUE(r->not_sent);
    EXPECT_NE(r->error.find("characters other than"), std::string::npos) << i << ": " << r->error;
  }
  EXPECT_EQ(sender_->producers(), 0u);
}

TEST_F(KafkaSenderTest, APropertiesNamePicksItsSettingsAndNewSettingsRetireItsProducer) {
  // TLS against the mock cluster's plain listener: a handshake that fails,
  // which shows the file's settings were used, and says so.
  sender_->SetProperties({{"secure", {{"security.protocol", "ssl"}}},
                          {"plain", {{"client.id", "delayd-test"}, {"linger.ms", "0"}}}});
  OutRequest secure = Request(1, "k1", "over tls");
  secure.url = url() + "?properties=secure";
  secure.timeout_ms = 1500;
  auto r = SendAndWait(secure);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->broker, OutResult::Broker::kFailed) << r->error;
  EXPECT_NE(r->error.find("last connection error: "), std::string::npos) << r->error;
  EXPECT_NE(r->error.find("SSL"), std::string::npos) << r->error;

  OutRequest plain = Request(2, "k2", "plain");
  plain.url = url() + "?properties=plain";
  r = SendAndWait(plain);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->broker, OutResult::Broker::kAcknowledged) << r->error;

  OutRequest unknown = Request(3, "k3", "x");
  unknown.url = url() + "?properties=gone";
  r = SendAndWait(unknown);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->broker, OutResult::Broker::kFailed) << "retried: a restart may bring it back";
  EXPECT_NE(r->error.find("names Kafka properties gone"), std::string::npos) << r->error;
  EXPECT_EQ(sender_->producers(), 2u);

  // As after SIGHUP: "secure" now says plaintext. Its old producer takes no
  // more records and is closed; "plain", unchanged, keeps its own.
  sender_->SetProperties({{"secure", {{"security.protocol", "plaintext"}}},
                          {"plain", {{"client.id", "delayd-test"}, {"linger.ms", "0"}}}});
  secure.job.id = 4;
  r = SendAndWait(secure);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->broker, OutResult::Broker::kAcknowledged) << r->error;
  EXPECT_EQ(sender_->producers(), 2u) << "the old secure producer closed, plain's kept";
  std::vector<testing::KafkaRecord> got = kafka_.Consume("orders", 2, 10s);
  ASSERT_EQ(got.size(), 2u);
}

TEST_F(KafkaSenderTest, AProducerThatCannotBeMadeIsRetriedSayingWhy) {
  // Settings read at start, then a CA file gone from disk: librdkafka
  // refuses to make the client, which may succeed once the file is back.
  sender_->SetProperties(
      {{"tls",
        {{"security.protocol", "ssl"}, {"ssl.ca.location", "/nonexistent/delayd-test-ca.pem"}}}});
  OutRequest req = Request(1, "k", "x");
  req.url = url() + "?properties=tls";
  auto r = SendAndWait(req);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->broker, OutResult::Broker::kFailed) << r->error;
  EXPECT_FALSE(r->not_sent) << "retried, not a dead letter";
  EXPECT_EQ(r->error.rfind("cannot make a Kafka producer: ", 0), 0u) << r->error;
  EXPECT_EQ(sender_->producers(), 0u);
}

TEST_F(KafkaSenderTest, StopDropsRecordsInFlightAndRunsNoCallbackAfter) {
  kafka_.SetBrokersUp(false);
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
