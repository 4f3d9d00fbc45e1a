// JSON forms of jobs for the HTTP API: parsing submissions and patches with
// field-by-field errors, and rendering jobs as they read back.
#pragma once

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>

#include "common/base64.h"
#include "common/json_writer.h"
#include "common/status.h"
#include "delivery/target_policy.h"
#include "engine/api_types.h"

namespace delayd::http {

struct JobLimits {
  // When set, every target URL must pass it (it outlives the parsing).
  const delivery::TargetPolicy* targets = nullptr;
  // The --kafka-properties NAMEs a Kafka target may pick (none when null).
  const std::set<std::string>* kafka_properties = nullptr;
  size_t max_body_bytes = engine::kDefaultMaxJobBytes;
  int64_t max_delay_ms = engine::kMaxDurationMs;
  size_t max_key_bytes = 200;
};

// One submission object `j`, parsed from `text` (its source, from which a
// JSON body is kept byte for byte); `prefix` names it in errors ("[3]" in a
// batch).
Result<engine::NewJob> ParseNewJob(const nlohmann::json& j, std::string_view text,
                                   const std::string& prefix, const JobLimits& limits,
                                   int64_t now_ms);
Result<engine::JobPatch> ParseJobPatch(const nlohmann::json& j, std::string_view text,
                                       const JobLimits& limits, int64_t now_ms);

// A priority, 0 (most urgent) to engine::kMaxPriority, as an error naming
// `field` otherwise.
Result<uint32_t> ParsePriority(const nlohmann::json& v, const std::string& field);

// A job as it reads back. WriteJobFields writes its members into an object
// the caller has opened, so a reply can add its own (`duplicate`).
void WriteJobFields(JsonWriter& w, const engine::JobInfo& info);
// The members "traceparent" and "tracestate" of a job or a timer's
// template: the submitter's trace context, null when none.
void WriteTraceContext(JsonWriter& w, const engine::JobSpec* spec);
// `body` or `body_base64`, as the body was given.
void WriteBody(JsonWriter& w, const std::string& body, engine::BodyEncoding encoding);
std::string RenderJob(const engine::JobInfo& info);
// The target policy's verdict on `url`, as an error naming `field`.
Status CheckTargetUrl(const JobLimits& limits, const std::string& url, const std::string& field);

using delayd::Base64Decode;
using delayd::Base64Encode;

}  // namespace delayd::http
