// kafka://BROKER[,BROKER...]/TOPIC[?properties=NAME], the URLs of Kafka push
// targets (doc/brokers.md): one parser for the API's checks, the target
// policy and the sender. A BROKER is HOST[:PORT] (port 9092 when left out);
// TOPIC follows Kafka's rules (1-249 of letters, digits, '.', '_', '-',
// neither "." nor ".."); NAME picks a --kafka-properties file.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/host_port.h"

namespace delayd {

struct KafkaUrl {
  std::vector<HostPort> brokers;
  std::string bootstrap;  // the brokers as librdkafka's bootstrap.servers takes them
  std::string topic;
  std::string properties;  // a --kafka-properties NAME, or ""
};

// Whether `url` names a Kafka target at all (its scheme), well formed or not.
bool IsKafkaUrl(std::string_view url);
// `url` read, or why it cannot be ("" on success).
std::optional<KafkaUrl> ParseKafkaUrl(std::string_view url, std::string* why = nullptr);
// Whether `name` may name a --kafka-properties file: 1 to 64 of A-Z a-z 0-9
// . _ -.
bool IsKafkaPropertiesName(std::string_view name);

}  // namespace delayd
