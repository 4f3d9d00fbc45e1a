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

// `prefix` names the object in errors ("target" -> "target.url").
Result<Target> ParseTarget(const nlohmann::json& j, const std::string& prefix);
Result<RetryPolicy> ParseRetry(const nlohmann::json& j, const std::string& prefix);
Result<TopicSettings> ParseTopicSettings(const nlohmann::json& j);

JsonWriter& WriteJson(JsonWriter& w, const Target& t);
JsonWriter& WriteJson(JsonWriter& w, const RetryPolicy& r);
nlohmann::json ToJson(const TopicSettings& s, bool with_secret);

// The stored form of a JobSpec ("" for a plain job) and back.
std::string EncodeSpec(const JobSpec& spec);
std::shared_ptr<const JobSpec> DecodeSpec(const std::string& text);
std::string EncodeSettings(const TopicSettings& s);
std::shared_ptr<const TopicSettings> DecodeSettings(const std::string& text);

// A number of ms, or a duration string ("30m"); `field` names it in errors.
Result<int64_t> ParseMillis(const nlohmann::json& j, const std::string& field);

}  // namespace delayd::engine
