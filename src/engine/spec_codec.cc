#include "engine/spec_codec.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <string_view>
#include <type_traits>

#include "common/json_text.h"

namespace delayd::engine {
namespace {

using nlohmann::json;

// Reads the members of one stored object. A member of the wrong type keeps
// the default it overwrites and is logged, named by `what` and its key.
class Reader {
 public:
  Reader(const json& j, std::string what) : j_(j), what_(std::move(what)) {
    if (!j_.is_object()) Unreadable("(itself)");  // every member takes its default
  }

  // The member `key`, or null when absent.
  const json& operator[](const char* key) const {
    static const json kNull;
    if (!j_.is_object()) return kNull;
    auto it = j_.find(key);
    return it == j_.end() ? kNull : *it;
  }
  // Into `out` when of its type (integers clamped to its range: what was
  // written fits); else `out` keeps its default, logged.
  template <typename T>
  void Get(const char* key, T& out) const {
    const json& v = (*this)[key];
    if (v.is_null()) return;
    bool read = false;
    if constexpr (std::is_same_v<T, std::string>) {
      if ((read = v.is_string())) out = v.get<std::string>();
    } else if constexpr (std::is_same_v<T, bool>) {
      if ((read = v.is_boolean())) out = v.get<bool>();
    } else if constexpr (std::is_floating_point_v<T>) {
      if ((read = v.is_number())) out = v.get<T>();
    } else {
      constexpr uint64_t kMax = std::min<uint64_t>(std::numeric_limits<T>::max(), INT64_MAX);
      if (v.is_number_unsigned()) {
        out = static_cast<T>(std::min(v.get<uint64_t>(), kMax));
        read = true;
      } else if (v.is_number_integer()) {
        out = static_cast<T>(std::clamp<int64_t>(v.get<int64_t>(), std::numeric_limits<T>::min(),
                                                 static_cast<int64_t>(kMax)));
        read = true;
      }
    }
    if (!read) Unreadable(key);
  }
  void Unreadable(std::string_view key) const {
    spdlog::error("store: {}.{} is unreadable; its default is used", what_, key);
  }

 private:
  const json& j_;
  const std::string what_;
};

Target ReadTarget(const json& j, const std::string& what) {
  Target t;
  Reader r(j, what);
  r.Get("url", t.url);
  r.Get("method", t.method);
  r.Get("timeout_ms", t.timeout_ms);
  const json& headers = r["headers"];
  if (headers.is_object()) {
    for (const auto& [name, value] : headers.items()) {
      if (value.is_string()) {
        t.headers.emplace_back(name, value.get<std::string>());
      } else {
        r.Unreadable("headers." + name);
      }
    }
  } else if (!headers.is_null()) {
    r.Unreadable("headers");
  }
  return t;
}

RetryPolicy ReadRetry(const json& j, const std::string& what) {
  RetryPolicy p;
  Reader r(j, what);
  r.Get("max_attempts", p.max_attempts);
  r.Get("initial_backoff_ms", p.initial_backoff_ms);
  r.Get("max_backoff_ms", p.max_backoff_ms);
  r.Get("multiplier", p.multiplier);
  r.Get("jitter", p.jitter);
  r.Get("retry_4xx", p.retry_4xx);
  r.Get("max_age_ms", p.max_age_ms);
  return p;
}

}  // namespace

JsonWriter& WriteJson(JsonWriter& w, const Target& t) {
  w.BeginObject();
  w.Key("url").String(t.url);
  w.Key("method").String(t.method);
  w.Key("headers").BeginObject();
  for (const auto& [k, v] : t.headers) w.Key(k).String(v);
  w.EndObject();
  w.Key("timeout_ms").Int(t.timeout_ms);
  return w.EndObject();
}

JsonWriter& WriteJson(JsonWriter& w, const RetryPolicy& r) {
  w.BeginObject();
  w.Key("max_attempts").Uint(r.max_attempts);
  w.Key("initial_backoff_ms").Int(r.initial_backoff_ms);
  w.Key("max_backoff_ms").Int(r.max_backoff_ms);
  w.Key("multiplier").Double(r.multiplier);
  w.Key("jitter").Bool(r.jitter);
  w.Key("retry_4xx").Bool(r.retry_4xx);
  w.Key("max_age_ms").Int(r.max_age_ms);
  return w.EndObject();
}

std::string EncodeSpec(const JobSpec& spec) {
  if (!spec.target && !spec.retry && spec.encoding == BodyEncoding::kRaw &&
      spec.traceparent.empty()) {
    return "";
  }
  std::string text;
  JsonWriter w(text);
  w.BeginObject();
  if (spec.target) WriteJson(w.Key("target"), *spec.target);
  if (spec.retry) WriteJson(w.Key("retry"), *spec.retry);
  if (spec.encoding != BodyEncoding::kRaw) {
    w.Key("encoding").String(spec.encoding == BodyEncoding::kJson ? "json" : "base64");
  }
  if (!spec.traceparent.empty()) {
    w.Key("traceparent").String(spec.traceparent);
    if (!spec.tracestate.empty()) w.Key("tracestate").String(spec.tracestate);
  }
  w.EndObject();
  return text;
}

std::shared_ptr<const JobSpec> DecodeSpec(const std::string& text) {
  if (text.empty()) return nullptr;
  auto spec = std::make_shared<JobSpec>();
  Result<json> parsed = ParseJson(text, "spec");
  if (!parsed.ok() || !parsed->is_object()) {
    spdlog::error("store: unreadable job spec {}", text.substr(0, 80));
    return spec;
  }
  Reader r(*parsed, "spec");
  // A stored target makes a push job, whatever its members hold.
  if (!r["target"].is_null()) spec->target = ReadTarget(r["target"], "spec.target");
  if (!r["retry"].is_null()) spec->retry = ReadRetry(r["retry"], "spec.retry");
  std::string encoding = "raw";
  r.Get("encoding", encoding);
  if (encoding == "json") {
    spec->encoding = BodyEncoding::kJson;
  } else if (encoding == "base64") {
    spec->encoding = BodyEncoding::kBase64;
  } else if (encoding != "raw") {
    r.Unreadable("encoding");
  }
  r.Get("traceparent", spec->traceparent);
  r.Get("tracestate", spec->tracestate);
  return spec;
}

std::shared_ptr<const JobSpec> SpecCache::Decode(const std::string& text) {
  if (text.empty()) return nullptr;
  return specs_.Get(text, [&text](std::string_view) { return DecodeSpec(text); });
}

std::string EncodeSettings(const TopicSettings& s) {
  std::string text;
  JsonWriter w(text);
  w.BeginObject();
  w.Key("target");
  s.target ? WriteJson(w, *s.target) : w.Null();
  w.Key("retry");
  s.retry ? WriteJson(w, *s.retry) : w.Null();
  w.Key("ttr_ms").Int(s.ttr_ms);
  w.Key("rate_limit_per_s").Double(s.rate_limit_per_s);
  w.Key("max_concurrency").Uint(s.max_concurrency);
  w.Key("alert");
  if (s.alert) {
    w.BeginObject();
    w.Key("webhook").String(s.alert->webhook);
    w.Key("on_dead_letter").Bool(s.alert->on_dead_letter);
    w.Key("consecutive_failures").Uint(s.alert->consecutive_failures);
    w.Key("min_interval_s").Int(s.alert->min_interval_s);
    w.EndObject();
  } else {
    w.Null();
  }
  w.Key("signing_secret").String(s.signing_secret);
  w.EndObject();
  return text;
}

std::shared_ptr<const TopicSettings> DecodeSettings(const std::string& text) {
  if (text.empty()) return nullptr;
  Result<json> parsed = ParseJson(text, "settings");
  if (!parsed.ok() || !parsed->is_object()) {
    spdlog::error("store: unreadable topic settings {}", text.substr(0, 80));
    return nullptr;
  }
  auto s = std::make_shared<TopicSettings>();
  Reader r(*parsed, "settings");
  if (!r["target"].is_null()) s->target = ReadTarget(r["target"], "settings.target");
  if (!r["retry"].is_null()) s->retry = ReadRetry(r["retry"], "settings.retry");
  r.Get("ttr_ms", s->ttr_ms);
  r.Get("signing_secret", s->signing_secret);
  r.Get("rate_limit_per_s", s->rate_limit_per_s);
  r.Get("max_concurrency", s->max_concurrency);
  if (!r["alert"].is_null()) {
    AlertRule a;
    Reader alert(r["alert"], "settings.alert");
    alert.Get("webhook", a.webhook);
    alert.Get("on_dead_letter", a.on_dead_letter);
    alert.Get("consecutive_failures", a.consecutive_failures);
    alert.Get("min_interval_s", a.min_interval_s);
    s->alert = std::move(a);
  }
  return s;
}

}  // namespace delayd::engine
