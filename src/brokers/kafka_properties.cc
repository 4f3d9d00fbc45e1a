#include "brokers/kafka_properties.h"

#include <librdkafka/rdkafka.h>

#include <array>
#include <fstream>
#include <memory>

#include "common/kafka_url.h"

namespace delayd::brokers {

namespace {

// What a properties file may set: client-side settings only. Those delayd's
// guarantees rest on (enable.idempotence, acks, bootstrap.servers,
// message.timeout.ms, the callbacks) stay delayd's.
constexpr std::array<std::string_view, 6> kAllowedKeys = {
    "security.protocol", "client.id", "compression.type",
    "compression.codec", "linger.ms", "queue.buffering.max.ms"};
constexpr std::array<std::string_view, 3> kAllowedPrefixes = {"ssl.", "sasl.", "batch."};

bool Allowed(std::string_view key) {
  for (std::string_view k : kAllowedKeys) {
    if (key == k) return true;
  }
  for (std::string_view p : kAllowedPrefixes) {
    if (key.size() > p.size() && key.compare(0, p.size(), p) == 0) return true;
  }
  return false;
}

bool Blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\f'; }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && Blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && Blank(s.back())) s.remove_suffix(1);
  return s;
}

bool VarChar(char c, bool first) {
  return c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
         (!first && c >= '0' && c <= '9');
}

// `value` with each ${VAR} replaced, or the first variable not set.
Result<std::string> Expand(std::string_view value, const Getenv& getenv, const std::string& where) {
  std::string out;
  for (size_t i = 0; i < value.size();) {
    const size_t end = value.compare(i, 2, "${") == 0 ? value.find('}', i + 2) : value.npos;
    std::string_view name = end == value.npos ? "" : value.substr(i + 2, end - i - 2);
    bool var = !name.empty() && VarChar(name[0], true);
    for (char c : name) var = var && VarChar(c, false);
    if (!var) {
      out += value[i++];
      continue;
    }
    const std::string n(name);
    const char* v = getenv(n.c_str());
    if (v == nullptr) {
      return Status::InvalidArgument(where + ": ${" + n + "} is not set in delayd's environment");
    }
    out += v;
    i = end + 1;
  }
  return out;
}

}  // namespace

Result<KafkaSettings> ParseKafkaProperties(std::string_view text, const std::string& source,
                                           const Getenv& getenv) {
  if (text.size() > kMaxPropertiesBytes) {
    return Status::InvalidArgument(source + ": larger than " + std::to_string(kMaxPropertiesBytes) +
                                   " bytes");
  }
  // Each value is tried on a configuration of librdkafka's own, which knows
  // every key and the values each takes.
  std::unique_ptr<rd_kafka_conf_t, decltype(&rd_kafka_conf_destroy)> conf(rd_kafka_conf_new(),
                                                                          &rd_kafka_conf_destroy);
  KafkaSettings out;
  size_t line_no = 0;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = Trim(text.substr(0, nl));
    text.remove_prefix(nl == text.npos ? text.size() : nl + 1);
    ++line_no;
    if (line.empty() || line.front() == '#' || line.front() == '!') continue;
    const std::string at = source + " line " + std::to_string(line_no);
    const size_t eq = line.find('=');
    if (eq == line.npos) return Status::InvalidArgument(at + ": not key=value");
    const std::string key(Trim(line.substr(0, eq)));
    const std::string where = at + " (" + key + ")";
    if (key.empty()) return Status::InvalidArgument(at + ": no key before '='");
    if (!Allowed(key)) {
      return Status::InvalidArgument(
          where +
          ": not a setting a properties file may change (security.protocol, ssl.*, sasl.*, "
          "client.id, compression.type, linger.ms, batch.*; delayd sets the rest)");
    }
    Result<std::string> value = Expand(Trim(line.substr(eq + 1)), getenv, where);
    if (!value.ok()) return value.status();
    char err[512] = {};
    if (rd_kafka_conf_set(conf.get(), key.c_str(), value->c_str(), err, sizeof err) !=
        RD_KAFKA_CONF_OK) {
      // librdkafka's words name the key and what it takes; a secret's value
      // is never refused (any string will do), so none is repeated here.
      return Status::InvalidArgument(where + ": " + err);
    }
    if (out.size() == kMaxPropertiesSettings) {
      return Status::InvalidArgument(source + ": more than " +
                                     std::to_string(kMaxPropertiesSettings) + " settings");
    }
    out.emplace_back(key, std::move(*value));
  }
  // A client made with the settings, connected nowhere, finds what only
  // rd_kafka_new checks (a certificate file that cannot be read, a SASL
  // mechanism this build lacks).
  rd_kafka_conf_set_log_cb(conf.get(), [](const rd_kafka_t*, int, const char*, const char*) {});
  char err[512] = {};
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf.get(), err, sizeof err);
  if (rk == nullptr) return Status::InvalidArgument(source + ": " + err);
  conf.release();  // rk's
  rd_kafka_destroy(rk);
  return out;
}

Result<KafkaPropertySets> LoadKafkaProperties(const std::map<std::string, std::string>& files,
                                              const Getenv& getenv) {
  KafkaPropertySets out;
  for (const auto& [name, path] : files) {
    const std::string source = "kafka properties " + name + " (" + path + ")";
    std::ifstream in(path, std::ios::binary);
    if (!in) return Status::InvalidArgument(source + ": cannot be read");
    std::string text;
    text.resize(kMaxPropertiesBytes + 1);
    in.read(text.data(), static_cast<std::streamsize>(text.size()));
    if (in.bad()) return Status::InvalidArgument(source + ": cannot be read");
    text.resize(static_cast<size_t>(in.gcount()));
    Result<KafkaSettings> settings = ParseKafkaProperties(text, source, getenv);
    if (!settings.ok()) return settings.status();
    out.emplace(name, std::move(*settings));
  }
  return out;
}

Result<std::pair<std::string, std::string>> ParsePropertiesFlag(std::string_view flag) {
  const size_t eq = flag.find('=');
  if (eq == flag.npos || eq + 1 == flag.size()) {
    return Status::InvalidArgument("--kafka-properties takes NAME=FILE, not '" +
                                   std::string(flag.substr(0, 200)) + "'");
  }
  std::string_view name = flag.substr(0, eq);
  if (!IsKafkaPropertiesName(name)) {
    return Status::InvalidArgument("--kafka-properties: the NAME '" +
                                   std::string(name.substr(0, 200)) +
                                   "' is not 1 to 64 of A-Z a-z 0-9 . _ -");
  }
  return std::pair{std::string(name), std::string(flag.substr(eq + 1))};
}

}  // namespace delayd::brokers
