#include "common/kafka_url.h"

#include <algorithm>
#include <cctype>

namespace delayd {

namespace {

constexpr size_t kMaxBrokers = 32;

std::optional<KafkaUrl> Refuse(std::string* why, std::string text) {
  if (why != nullptr) *why = std::move(text);
  return std::nullopt;
}

bool TopicChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
}

}  // namespace

bool IsKafkaUrl(std::string_view url) { return url.rfind("kafka://", 0) == 0; }

std::optional<KafkaUrl> ParseKafkaUrl(std::string_view url, std::string* why) {
  if (!IsKafkaUrl(url)) return Refuse(why, "is not kafka://");
  url.remove_prefix(8);
  KafkaUrl out;
  const size_t slash = url.find('/');
  if (slash == url.npos) return Refuse(why, "names no topic (kafka://BROKER[,BROKER...]/TOPIC)");
  std::string_view brokers = url.substr(0, slash);
  std::string_view rest = url.substr(slash + 1);
  while (!brokers.empty() || out.brokers.empty()) {
    const size_t comma = brokers.find(',');
    std::string_view one = brokers.substr(0, comma);
    std::optional<HostPort> hp = ParseHostPort(one, 9092);
    if (!hp) {
      return Refuse(
          why, "has a broker that is not HOST[:PORT]: \"" + std::string(one.substr(0, 100)) + "\"");
    }
    out.brokers.push_back(std::move(*hp));
    if (out.brokers.size() > kMaxBrokers) {
      return Refuse(why, "names more than " + std::to_string(kMaxBrokers) + " brokers");
    }
    if (comma == brokers.npos) break;
    brokers.remove_prefix(comma + 1);
    if (brokers.empty()) return Refuse(why, "has an empty broker after a comma");
  }
  for (const HostPort& b : out.brokers) {
    if (!out.bootstrap.empty()) out.bootstrap += ',';
    const bool v6 = b.host.find(':') != std::string::npos;
    out.bootstrap += (v6 ? "[" + b.host + "]" : b.host) + ":" + std::to_string(b.port);
  }
  const size_t q = rest.find('?');
  std::string_view topic = rest.substr(0, q);
  if (topic.empty() || topic.size() > 249 || topic == "." || topic == "..") {
    return Refuse(why, "must name a topic of 1 to 249 characters, neither \".\" nor \"..\"");
  }
  for (char c : topic) {
    if (!TopicChar(c))
      return Refuse(why, "has a topic with characters other than A-Z a-z 0-9 . _ -");
  }
  out.topic = std::string(topic);
  if (q != rest.npos) {
    std::string_view query = rest.substr(q + 1);
    constexpr std::string_view kKey = "properties=";
    if (query.rfind(kKey, 0) != 0) return Refuse(why, "takes no query but ?properties=NAME");
    std::string_view name = query.substr(kKey.size());
    if (!IsKafkaPropertiesName(name)) {
      return Refuse(why, "has a properties name other than 1 to 64 of A-Z a-z 0-9 . _ -");
    }
    out.properties = std::string(name);
  }
  return out;
}

bool IsKafkaPropertiesName(std::string_view name) {
  return !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), TopicChar);
}

}  // namespace delayd
