// The API's JSON forms of JobSpec, TopicSettings and their parts. Parsers
// validate every field and name the first bad one in the returned status
// (Status::field()); unknown fields are errors. What the store holds is
// read by spec_codec.h instead, which applies none of these rules.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "common/status.h"
#include "engine/spec.h"
#include "engine/spec_codec.h"

namespace delayd::engine {

// `prefix` names the object in errors ("target" -> "target.url"). A target's
// headers must pass TargetHeaderFault (common/header_rules.h).
Result<Target> ParseTarget(const nlohmann::json& j, const std::string& prefix);
Result<RetryPolicy> ParseRetry(const nlohmann::json& j, const std::string& prefix);
Result<TopicSettings> ParseTopicSettings(const nlohmann::json& j);

// A topic's settings as the API shows them: the stored form, with the
// secret or only whether one is set.
nlohmann::json ToJson(const TopicSettings& s, bool with_secret);

// A number of ms, or a duration string ("30m"), from 0 to `max_ms`: the one
// checked parser of every duration a client gives, in either spelling, with
// one limit (beanstalkd's longest delay unless a field has a smaller one).
// `field` names it in errors; nothing wraps or saturates.
Result<int64_t> ParseMillis(const nlohmann::json& j, const std::string& field,
                            int64_t max_ms = kMaxDurationMs);

}  // namespace delayd::engine
