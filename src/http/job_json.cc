#include "http/job_json.h"

#include "common/base64.h"
#include "common/json_text.h"
#include "common/kafka_url.h"
#include "common/target_kind.h"
#include "common/time_format.h"
#include "engine/spec_codec.h"
#include "engine/spec_json.h"
#include "engine/timer_key.h"

namespace delayd::http {

using engine::BodyEncoding;
using nlohmann::json;

namespace {

std::string Field(const std::string& prefix, const char* name) {
  return prefix.empty() ? name : prefix + "." + name;
}

// The body of a submission or patch: `body` (any JSON, kept as the text it
// was sent as) or `body_base64`. `text` is the source of `j`.
Status ParseBody(const json& j, std::string_view text, const std::string& prefix,
                 const JobLimits& limits, std::string* body, BodyEncoding* encoding) {
  if (j.contains("body") && j.contains("body_base64")) {
    return Status::InvalidField(Field(prefix, "body_base64"), "give either body or body_base64");
  }
  if (j.contains("body")) {
    *body = std::string(JsonMemberText(text, "body").value_or("null"));
    *encoding = BodyEncoding::kJson;
  } else if (j.contains("body_base64")) {
    const json& b = j["body_base64"];
    std::optional<std::string> bytes;
    if (b.is_string()) bytes = Base64Decode(b.get<std::string>());
    if (!bytes) return Status::InvalidField(Field(prefix, "body_base64"), "must be base64 text");
    *body = std::move(*bytes);
    *encoding = BodyEncoding::kBase64;
  } else {
    return Status::Ok();
  }
  if (body->size() > limits.max_body_bytes) {
    return Status::InvalidField(
        Field(prefix, j.contains("body") ? "body" : "body_base64"),
        "is larger than the job size limit of " + std::to_string(limits.max_body_bytes) + " bytes");
  }
  return Status::Ok();
}

// `delay` or `run_at` into a due time; nullopt when neither is given.
Result<std::optional<int64_t>> ParseDue(const json& j, const std::string& prefix,
                                        const JobLimits& limits, int64_t now_ms) {
  if (j.contains("delay") && j.contains("run_at")) {
    return Status::InvalidField(Field(prefix, "run_at"), "give either delay or run_at");
  }
  if (j.contains("delay")) {
    Result<int64_t> ms = engine::ParseMillis(j["delay"], Field(prefix, "delay"));
    if (!ms.ok()) return ms.status();
    if (*ms > limits.max_delay_ms) {
      return Status::InvalidField(Field(prefix, "delay"), "is longer than the longest delay");
    }
    return std::optional<int64_t>(now_ms + *ms);
  }
  if (j.contains("run_at")) {
    const json& v = j["run_at"];
    std::optional<int64_t> at;
    if (v.is_string()) at = ParseRfc3339(v.get<std::string>());
    if (!at) {
      return Status::InvalidField(Field(prefix, "run_at"),
                                  "must be an RFC 3339 date-time such as 2026-11-22T09:30:00Z");
    }
    if (*at - now_ms > limits.max_delay_ms) {
      return Status::InvalidField(Field(prefix, "run_at"),
                                  "is further away than the longest delay");
    }
    return std::optional<int64_t>(*at);
  }
  return std::optional<int64_t>();
}

Status CheckKnown(const json& j, const std::string& prefix,
                  std::initializer_list<const char*> known) {
  if (!j.is_object()) {
    return Status::InvalidField(prefix.empty() ? "body" : prefix, "must be a JSON object");
  }
  for (const auto& [name, value] : j.items()) {
    bool found = false;
    for (const char* k : known) found = found || name == k;
    if (!found) return Status::InvalidField(Field(prefix, name.c_str()), "unknown field");
  }
  return Status::Ok();
}

Result<int64_t> ParseTtr(const json& v, const std::string& field) {
  Result<int64_t> ms = engine::ParseMillis(v, field);
  if (!ms.ok()) return ms;
  if (*ms < 1000) return Status::InvalidField(field, "must be at least 1 s (1000 ms)");
  if (*ms > engine::kMaxDurationMs) {
    return Status::InvalidField(
        field,
        "is too large: at most " + std::to_string(engine::kMaxDurationMs) + " ms (2^32-1 s)");
  }
  return ms;
}

}  // namespace

Result<uint32_t> ParsePriority(const json& v, const std::string& field) {
  if (!v.is_number_unsigned() || v.get<uint64_t>() > engine::kMaxPriority) {
    return Status::InvalidField(field, "must be an integer from 0 (most urgent) to " +
                                           std::to_string(engine::kMaxPriority));
  }
  return static_cast<uint32_t>(v.get<uint64_t>());
}

Result<engine::NewJob> ParseNewJob(const json& j, std::string_view text, const std::string& prefix,
                                   const JobLimits& limits, int64_t now_ms) {
  Status s = CheckKnown(
      j, prefix,
      {"key", "priority", "delay", "run_at", "ttr_ms", "body", "body_base64", "target", "retry"});
  if (!s.ok()) return s;
  engine::NewJob n;
  if (j.contains("key") && !j["key"].is_null()) {
    const json& k = j["key"];
    if (!k.is_string() || k.get<std::string>().empty() ||
        k.get<std::string>().size() > limits.max_key_bytes) {
      return Status::InvalidField(Field(prefix, "key"), "must be a non-empty string of at most " +
                                                            std::to_string(limits.max_key_bytes) +
                                                            " bytes");
    }
    n.key = k.get<std::string>();
    if (n.key.rfind(engine::kTimerKeyPrefix, 0) == 0) {
      return Status::InvalidField(Field(prefix, "key"),
                                  "must not start with \"timer:\", which names timer fires");
    }
  }
  if (j.contains("priority")) {
    Result<uint32_t> p = ParsePriority(j["priority"], Field(prefix, "priority"));
    if (!p.ok()) return p.status();
    n.priority = *p;
  }
  Result<std::optional<int64_t>> due = ParseDue(j, prefix, limits, now_ms);
  if (!due.ok()) return due.status();
  n.run_at_ms = *due;
  if (j.contains("ttr_ms")) {
    Result<int64_t> ttr = ParseTtr(j["ttr_ms"], Field(prefix, "ttr_ms"));
    if (!ttr.ok()) return ttr.status();
    n.ttr_ms = *ttr;
  }
  s = ParseBody(j, text, prefix, limits, &n.body, &n.spec.encoding);
  if (!s.ok()) return s;
  if (j.contains("target") && !j["target"].is_null()) {
    Result<engine::Target> t = engine::ParseTarget(j["target"], Field(prefix, "target"));
    if (!t.ok()) return t.status();
    s = CheckTargetUrl(limits, t->url, Field(Field(prefix, "target"), "url"));
    if (!s.ok()) return s;
    n.spec.target = std::move(*t);
  }
  if (j.contains("retry") && !j["retry"].is_null()) {
    Result<engine::RetryPolicy> r = engine::ParseRetry(j["retry"], Field(prefix, "retry"));
    if (!r.ok()) return r.status();
    n.spec.retry = *r;
  }
  return n;
}

Result<engine::JobPatch> ParseJobPatch(const json& j, std::string_view text,
                                       const JobLimits& limits, int64_t now_ms) {
  Status s = CheckKnown(
      j, "", {"priority", "delay", "run_at", "ttr_ms", "body", "body_base64", "target", "retry"});
  if (!s.ok()) return s;
  engine::JobPatch p;
  if (j.contains("priority")) {
    Result<uint32_t> pri = ParsePriority(j["priority"], "priority");
    if (!pri.ok()) return pri.status();
    p.priority = *pri;
  }
  Result<std::optional<int64_t>> due = ParseDue(j, "", limits, now_ms);
  if (!due.ok()) return due.status();
  p.due_ms = *due;
  if (j.contains("ttr_ms")) {
    Result<int64_t> ttr = ParseTtr(j["ttr_ms"], "ttr_ms");
    if (!ttr.ok()) return ttr.status();
    p.ttr_ms = *ttr;
  }
  if (j.contains("body") || j.contains("body_base64")) {
    std::string body;
    BodyEncoding encoding = BodyEncoding::kRaw;
    s = ParseBody(j, text, "", limits, &body, &encoding);
    if (!s.ok()) return s;
    p.body = std::move(body);
    p.encoding = encoding;
  }
  if (j.contains("target")) {
    if (j["target"].is_null()) {
      p.target = std::optional<engine::Target>();
    } else {
      Result<engine::Target> t = engine::ParseTarget(j["target"], "target");
      if (!t.ok()) return t.status();
      s = CheckTargetUrl(limits, t->url, "target.url");
      if (!s.ok()) return s;
      p.target = std::optional<engine::Target>(std::move(*t));
    }
  }
  if (j.contains("retry")) {
    if (j["retry"].is_null()) {
      p.retry = std::optional<engine::RetryPolicy>();
    } else {
      Result<engine::RetryPolicy> r = engine::ParseRetry(j["retry"], "retry");
      if (!r.ok()) return r.status();
      p.retry = std::optional<engine::RetryPolicy>(*r);
    }
  }
  return p;
}

Status CheckTargetUrl(const JobLimits& limits, const std::string& url, const std::string& field) {
  if (IsKafkaUrl(url)) {
    std::optional<KafkaUrl> k = ParseKafkaUrl(url);  // ParseTarget read it
    if (k && !k->properties.empty() &&
        (limits.kafka_properties == nullptr || !limits.kafka_properties->count(k->properties))) {
      return Status::InvalidField(field, "names Kafka properties " + k->properties +
                                             ", which this server does not have "
                                             "(--kafka-properties NAME=FILE)");
    }
  }
  if (limits.targets == nullptr) return Status::Ok();
  Status s = limits.targets->CheckUrl(url);
  return s.ok() ? s : Status::InvalidField(field, s.message());
}

// A body reads back as it was given: JSON stays JSON, byte for byte; bytes
// (and beanstalk bodies that are not JSON) come back as base64. A body given
// as JSON was validated when it was submitted, so it is embedded as it is;
// any other is checked first.
void WriteBody(JsonWriter& w, const std::string& body, engine::BodyEncoding encoding) {
  if (!body.empty() &&
      (encoding == BodyEncoding::kJson ||
       // nlohmann skips a byte-order mark that would make the reply invalid.
       (encoding == BodyEncoding::kRaw && body[0] != '\xEF' && json::accept(body)))) {
    w.Key("body").Raw(body);
  } else {
    w.Key("body_base64").String(Base64Encode(body));
  }
}

void WriteTraceContext(JsonWriter& w, const engine::JobSpec* spec) {
  const bool traced = spec != nullptr && !spec->traceparent.empty();
  w.Key("traceparent");
  traced ? w.String(spec->traceparent) : w.Null();
  w.Key("tracestate");
  traced && !spec->tracestate.empty() ? w.String(spec->tracestate) : w.Null();
}

void WriteJobFields(JsonWriter& w, const engine::JobInfo& info) {
  const store::JobRecord& r = info.record;
  const engine::JobSpec* spec = info.spec.get();
  w.Key("id").Uint(r.id);
  w.Key("topic").String(r.tube);
  w.Key("key");
  r.key.empty() ? w.Null() : w.String(r.key);
  w.Key("state").String(engine::StateName(info.state));
  w.Key("priority").Uint(r.priority);
  w.Key("due_at").Time(r.due_ms);
  w.Key("run_at").Time(r.run_at_ms != 0 ? r.run_at_ms : r.due_ms);
  w.Key("timer");
  if (std::optional<engine::FireOfKey> fire = engine::ParseTimerFireKey(r.key)) {
    w.BeginObject();
    w.Key("id").Uint(fire->timer_id);
    w.Key("fire_at").Time(fire->fire_ms);
    w.EndObject();
  } else {
    w.Null();
  }
  w.Key("created_at").Time(r.created_ms);
  w.Key("ttr_ms").Int(r.ttr_ms);
  w.Key("attempts").Uint(r.counters.reserves);
  w.Key("target");
  spec && spec->target ? engine::WriteJson(w, *spec->target) : w.Null();
  w.Key("target_kind");
  spec && spec->target ? w.String(KindName(KindOfUrl(spec->target->url))) : w.Null();
  w.Key("retry");
  spec && spec->retry ? engine::WriteJson(w, *spec->retry) : w.Null();
  WriteTraceContext(w, spec);
  w.Key("last_error");
  r.last_error.empty() ? w.Null() : w.String(r.last_error);
  WriteBody(w, r.body, spec ? spec->encoding : BodyEncoding::kRaw);
  if (r.state == store::StoredState::kDone) w.Key("done_at").Time(r.done_ms);
  if (info.state == engine::JobState::kReserved) {
    w.Key("lease").BeginObject();
    w.Key("lease").Uint(info.lease);
    w.Key("expires_at").Time(info.lease_until_ms);
    w.Key("holder").String(info.pushing ? "dispatcher" : "consumer");
    w.EndObject();
  }
  w.Key("counters").BeginObject();
  w.Key("reserves").Uint(r.counters.reserves);
  w.Key("timeouts").Uint(r.counters.timeouts);
  w.Key("releases").Uint(r.counters.releases);
  w.Key("buries").Uint(r.counters.buries);
  w.Key("kicks").Uint(r.counters.kicks);
  w.EndObject();
}

std::string RenderJob(const engine::JobInfo& info) {
  std::string out;
  JsonWriter w(out);
  w.BeginObject();
  WriteJobFields(w, info);
  w.EndObject();
  return out;
}

}  // namespace delayd::http
