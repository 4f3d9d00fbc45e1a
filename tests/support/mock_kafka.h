// librdkafka's mock cluster (rdkafka_mock.h) for tests of Kafka targets:
// brokers speaking the Kafka protocol on loopback ports in the test's own
// process, and a consumer that reads a topic back.
#pragma once

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace delayd::testing {

struct KafkaRecord {
  std::string key, value;
  int32_t partition = -1;
  std::map<std::string, std::string> headers;
};

class MockKafka {
 public:
  static constexpr int32_t kPartitions = 4;  // of each topic CreateTopic makes

  explicit MockKafka(int brokers = 3);
  ~MockKafka();
  MockKafka(const MockKafka&) = delete;
  MockKafka& operator=(const MockKafka&) = delete;

  rd_kafka_mock_cluster_t* cluster() { return cluster_; }
  const std::string& bootstrap() const { return bootstrap_; }
  std::string url(const std::string& topic) const { return "kafka://" + bootstrap_ + "/" + topic; }
  void CreateTopic(const std::string& topic);
  void SetBrokersUp(bool up);

  // Every record of `topic` from its start, once `n` are there or `wait`
  // has passed.
  std::vector<KafkaRecord> Consume(const std::string& topic, size_t n,
                                   std::chrono::milliseconds wait);

 private:
  int brokers_;
  rd_kafka_t* rk_ = nullptr;
  rd_kafka_mock_cluster_t* cluster_ = nullptr;
  std::string bootstrap_;
};

}  // namespace delayd::testing
