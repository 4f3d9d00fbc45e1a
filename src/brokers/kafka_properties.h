// Kafka properties files: the librdkafka settings a Kafka target picks by
// name (kafka://b1,b2/orders?properties=NAME), so that TLS and SASL
// settings, secrets included, live on the server and never in a job
// (doc/brokers.md, "TLS and SASL by reference").
//
// `--kafka-properties NAME=FILE` names each file. A file has one
// `key=value` a line, as librdkafka's and kcat's examples write them;
// blank lines and lines starting with # or ! are skipped, blanks around the
// key and the value are not part of them, and `${VAR}` in a value is read
// from delayd's environment (any other `$` is kept). Only client-side
// settings are allowed: security.protocol, ssl.*, sasl.*, client.id,
// compression.type (compression.codec), linger.ms, batch.num.messages and
// batch.size. Every value is tried on a librdkafka configuration when the
// file is read, so a misspelt key or a bad value stops delayd at start
// (or is refused on SIGHUP) rather than failing each job. Errors name the
// file, the line and the key, never a value: values may be secrets.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace delayd::brokers {

// One file's settings, in file order.
using KafkaSettings = std::vector<std::pair<std::string, std::string>>;
// Each NAME's settings.
using KafkaPropertySets = std::map<std::string, KafkaSettings>;

// Largest properties file read, and most settings in one.
inline constexpr size_t kMaxPropertiesBytes = 1 << 20;
inline constexpr size_t kMaxPropertiesSettings = 1000;

// The environment as ParseKafkaProperties reads it (nullptr: not set).
using Getenv = std::function<const char*(const char*)>;

// `text` read as a properties file; `source` names it in errors.
Result<KafkaSettings> ParseKafkaProperties(std::string_view text, const std::string& source,
                                           const Getenv& getenv);

// Reads every NAME=FILE of `files`; the first error (naming NAME's file)
// fails the lot.
Result<KafkaPropertySets> LoadKafkaProperties(const std::map<std::string, std::string>& files,
                                              const Getenv& getenv);

// Splits "NAME=FILE" as --kafka-properties takes it, checking NAME.
Result<std::pair<std::string, std::string>> ParsePropertiesFlag(std::string_view flag);

}  // namespace delayd::brokers
