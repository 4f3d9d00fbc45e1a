// JSON forms of JobSpec, TopicSettings and their parts. Parsers validate every
// field and name the first bad one in the returned status (Status::field()).
// Unknown fields are errors.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "common/json_writer.h"
#include "common/status.h"
#include "engine/spec.h"

namespace delayd::engine {

// `prefix` names the object in errors ("target" -> "target.url"). A target's
// headers must pass TargetHeaderFault (common/header_rules.h) unless
// `stored`: what the store holds is read back as it was written.
Result<Target> ParseTarget(const nlohmann::json& j, const std::string& prefix, bool stored = false);
Result<RetryPolicy> ParseRetry(const nlohmann::json& j, const std::string& prefix);
Result<TopicSettings> ParseTopicSettings(const nlohmann::json& j, bool stored = false);

JsonWriter& WriteJson(JsonWriter& w, const Target& t);
JsonWriter& WriteJson(JsonWriter& w, const RetryPolicy& r);
nlohmann::json ToJson(const TopicSettings& s, bool with_secret);

// The stored form of a JobSpec ("" for a plain job) and back.
std::string EncodeSpec(const JobSpec& spec);
std::shared_ptr<const JobSpec> DecodeSpec(const std::string& text);
std::string EncodeSettings(const TopicSettings& s);
std::shared_ptr<const TopicSettings> DecodeSettings(const std::string& text);

// A number of ms, or a duration string ("30m"), from 0 to `max_ms`: the one
// checked parser of every duration a client gives, in either spelling, with
// one limit (beanstalkd's longest delay unless a field has a smaller one).
// `field` names it in errors; nothing wraps or saturates.
Result<int64_t> ParseMillis(const nlohmann::json& j, const std::string& field,
                            int64_t max_ms = kMaxDurationMs);

}  // namespace delayd::engine
