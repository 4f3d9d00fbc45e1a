#include "timer/timer_spec.h"

#include <nlohmann/json.hpp>

#include "common/base64.h"
#include "common/json_dump.h"
#include "common/json_text.h"
#include "engine/spec_codec.h"

namespace delayd::timer {

using nlohmann::json;

const char* MisfireName(Misfire m) {
  switch (m) {
    case Misfire::kSkip:
      return "skip";
    case Misfire::kFireOnce:
      return "fire_once";
    case Misfire::kFireAll:
      return "fire_all";
  }
  return "skip";
}

const char* OverlapName(Overlap o) { return o == Overlap::kSkip ? "skip" : "allow"; }

std::string EncodeTimerSpec(const TimerSpec& s) {
  json j = {{"topic", s.topic},
            {"schedule", s.schedule},
            {"timezone", s.timezone},
            {"active", s.active},
            {"start_ms", s.start_ms},
            {"end_ms", s.end_ms},
            {"misfire", MisfireName(s.misfire)},
            {"misfire_limit", s.misfire_limit},
            {"overlap", OverlapName(s.overlap)},
            {"priority", s.job.priority},
            {"ttr_ms", s.job.ttr_ms},
            {"body_base64", Base64Encode(s.job.body)},
            {"job_spec", engine::EncodeSpec(s.job.spec)}};
  return DumpJson(j);
}

Result<TimerSpec> DecodeTimerSpec(const std::string& text) {
  Result<json> parsed = ParseJson(text, "definition");
  if (!parsed.ok() || !parsed->is_object()) return Status::Internal("unreadable timer definition");
  const json& j = *parsed;
  TimerSpec s;
  try {
    s.topic = j.at("topic").get<std::string>();
    s.schedule = j.at("schedule").get<std::string>();
    s.timezone = j.at("timezone").get<std::string>();
    s.active = j.at("active").get<bool>();
    s.start_ms = j.at("start_ms").get<int64_t>();
    s.end_ms = j.at("end_ms").get<int64_t>();
    const std::string misfire = j.at("misfire").get<std::string>();
    s.misfire = misfire == "fire_once"  ? Misfire::kFireOnce
                : misfire == "fire_all" ? Misfire::kFireAll
                                        : Misfire::kSkip;
    s.misfire_limit = j.at("misfire_limit").get<uint32_t>();
    s.overlap = j.at("overlap").get<std::string>() == "skip" ? Overlap::kSkip : Overlap::kAllow;
    s.job.priority = j.at("priority").get<uint32_t>();
    s.job.ttr_ms = j.at("ttr_ms").get<int64_t>();
    std::optional<std::string> body = Base64Decode(j.at("body_base64").get<std::string>());
    if (!body) return Status::Internal("unreadable timer definition: body");
    s.job.body = std::move(*body);
    if (auto spec = engine::DecodeSpec(j.at("job_spec").get<std::string>())) s.job.spec = *spec;
  } catch (const json::exception& e) {
    return Status::Internal(std::string("unreadable timer definition: ") + e.what());
  }
  return s;
}

}  // namespace delayd::timer
