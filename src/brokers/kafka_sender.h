// KafkaSender: push deliveries to Kafka targets
// (kafka://BROKER[,BROKER...]/TOPIC), each a record produced with the job's
// key (its id when it has none) as the partition key, the body byte for
// byte as the value and delayd's headers and the target's own as record
// headers; done once the delivery report says the cluster has it
// (doc/brokers.md, "Kafka").
//
// One idempotent producer (enable.idempotence, acks=all) per cluster: per
// bootstrap list, properties (kafka_properties.h) and timeout, shared by
// every job sent there. The target's timeout is the producer's message.timeout.ms, the
// time an attempt may take with librdkafka's own retries, since librdkafka
// has no timeout per record. librdkafka connects by itself, to the
// bootstrap brokers and to those the cluster advertises; its connect
// callback checks each address against the target policy first.
//
// Threading: Send() and Stop() on the event loop, whose executor runs every
// callback. Each producer has a thread of its own polling librdkafka for
// delivery reports, which it hands to the loop.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "brokers/kafka_properties.h"
#include "common/clock.h"
#include "common/executor.h"
#include "common/kafka_url.h"
#include "common/recent_cache.h"
#include "delivery/http_client.h"
#include "delivery/target_policy.h"

namespace delayd::brokers {

class KafkaSender final : public delivery::HttpSender {
 public:
  // `policy` and `clock` must outlive the sender, and `policy` must not
  // change while it lives: the sender's own threads read it.
  KafkaSender(Executor executor, const delivery::TargetPolicy& policy, const Clock& clock);
  ~KafkaSender() override;  // Stop()
  KafkaSender(const KafkaSender&) = delete;
  KafkaSender& operator=(const KafkaSender&) = delete;

  void Send(delivery::OutRequest request, Callback done) override;
  // The settings each properties NAME stands for (at start, and again on
  // SIGHUP). A producer made with a NAME's earlier settings takes no more
  // records and is closed once its records are reported.
  void SetProperties(const KafkaPropertySets& sets);
  // Stops every producer: records not yet reported are purged and their
  // callbacks never run (their jobs are sent again once their leases run
  // out: at least once). Later sends are dropped.
  void Stop();

  // Producers kept (for tests and /metrics).
  size_t producers() const { return producers_.size(); }
  // Tests only: every producer fails as after a fatal idempotence error
  // from the cluster (rd_kafka_test_fatal_error).
  void FailProducersForTest();

  struct Producer;  // kafka_sender.cc

 private:
  void Fail(Callback done, delivery::OutResult r);  // reported on the loop
  void DropIdle(int64_t now_us);

  Executor executor_;
  const delivery::TargetPolicy& policy_;
  const Clock& clock_;
  struct Properties {
    KafkaSettings settings;
    uint64_t generation = 0;  // a producer made with an earlier one is retired
  };
  bool Current(const Producer& p) const;

  // Every record of a burst names one of a few URLs: each is parsed once
  // while it is held, not once a record (that was 2-5 % of the event loop
  // in bench/brokers' kafka/1000/once: bench/README.md).
  struct ParsedUrl {
    std::optional<KafkaUrl> url;
    std::string why;  // when it is not a URL this sender can read
  };
  RecentCache<ParsedUrl, 16> urls_;

  std::map<std::string, std::unique_ptr<Producer>> producers_;  // by cluster
  std::map<std::string, Properties> properties_;                // by NAME
  uint64_t generations_ = 0;
  int64_t swept_us_ = 0;
  bool stopped_ = false;
};

}  // namespace delayd::brokers
