#include "support/mock_kafka.h"

#include <gtest/gtest.h>

namespace delayd::testing {

MockKafka::MockKafka(int brokers) : brokers_(brokers) {
  char err[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  rd_kafka_conf_set(conf, "log_level", "2", err, sizeof err);
  rk_ = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
  EXPECT_NE(rk_, nullptr) << err;
  if (rk_ == nullptr) return;
  cluster_ = rd_kafka_mock_cluster_new(rk_, brokers);
  EXPECT_NE(cluster_, nullptr);
  if (cluster_ != nullptr) bootstrap_ = rd_kafka_mock_cluster_bootstraps(cluster_);
}

MockKafka::~MockKafka() {
  if (cluster_ != nullptr) rd_kafka_mock_cluster_destroy(cluster_);
  if (rk_ != nullptr) rd_kafka_destroy(rk_);
}

void MockKafka::CreateTopic(const std::string& topic) {
  EXPECT_EQ(rd_kafka_mock_topic_create(cluster_, topic.c_str(), kPartitions, brokers_),
            RD_KAFKA_RESP_ERR_NO_ERROR);
}

void MockKafka::SetBrokersUp(bool up) {
  for (int32_t b = 1; b <= brokers_; ++b) {
    up ? rd_kafka_mock_broker_set_up(cluster_, b) : rd_kafka_mock_broker_set_down(cluster_, b);
  }
}

std::vector<KafkaRecord> MockKafka::Consume(const std::string& topic, size_t n,
                                            std::chrono::milliseconds wait) {
  char err[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap_.c_str(), err, sizeof err);
  rd_kafka_conf_set(conf, "group.id", "delayd-test", err, sizeof err);
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
  EXPECT_NE(rk, nullptr) << err;
  if (rk == nullptr) return {};
  rd_kafka_topic_partition_list_t* parts = rd_kafka_topic_partition_list_new(kPartitions);
  for (int32_t p = 0; p < kPartitions; ++p) {
    rd_kafka_topic_partition_list_add(parts, topic.c_str(), p)->offset = RD_KAFKA_OFFSET_BEGINNING;
  }
  rd_kafka_assign(rk, parts);
  rd_kafka_topic_partition_list_destroy(parts);
  std::vector<KafkaRecord> out;
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (out.size() < n && std::chrono::steady_clock::now() < deadline) {
    rd_kafka_message_t* m = rd_kafka_consumer_poll(rk, 100);
    if (m == nullptr) continue;
    if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
      KafkaRecord r;
      r.key.assign(static_cast<const char*>(m->key), m->key_len);
      r.value.assign(static_cast<const char*>(m->payload), m->len);
      r.partition = m->partition;
      rd_kafka_headers_t* hdrs = nullptr;
      if (rd_kafka_message_headers(m, &hdrs) == RD_KAFKA_RESP_ERR_NO_ERROR) {
        const char* name;
        const void* value;
        size_t size;
        for (size_t i = 0;
             rd_kafka_header_get_all(hdrs, i, &name, &value, &size) == RD_KAFKA_RESP_ERR_NO_ERROR;
             ++i) {
          r.headers[name] = std::string(static_cast<const char*>(value), size);
        }
      }
      out.push_back(std::move(r));
    }
    rd_kafka_message_destroy(m);
  }
  rd_kafka_consumer_close(rk);
  rd_kafka_destroy(rk);
  return out;
}

}  // namespace delayd::testing
