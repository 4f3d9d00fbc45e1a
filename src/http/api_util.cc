#include "http/api_util.h"

#include <algorithm>
#include <charconv>

#include "common/json_text.h"
#include "common/time_format.h"
#include "common/trace_context.h"
#include "engine/job_state.h"

namespace delayd::http {

using nlohmann::json;

void TakeTraceContext(const Request& req, engine::JobSpec* spec) {
  if (req.traceparent.empty()) return;
  std::optional<TraceParent> tp = ParseTraceparent(req.traceparent);
  if (!tp) return;
  spec->traceparent = FormatTraceparent(*tp);
  spec->tracestate = ParseTracestate(req.tracestate).value_or("");
}

Result<json> ParseBody(const Request& req, bool required) {
  if (req.body.empty()) {
    if (required) return Status::InvalidField("body", "a JSON body is required");
    return json::object();
  }
  // The body is read as JSON whatever Content-Type says: curl -d sends
  // form encoding by default, and the JSON error below is clearer.
  return ParseJson(req.body, "body");
}

std::optional<std::string> QueryValue(const std::vector<std::pair<std::string, std::string>>& q,
                                      std::string_view name) {
  for (auto& [k, v] : q) {
    if (k == name) return v;
  }
  return std::nullopt;
}

Result<int64_t> QueryInt(const std::vector<std::pair<std::string, std::string>>& q,
                         const char* name, int64_t lo, int64_t hi, int64_t dflt) {
  auto v = QueryValue(q, name);
  if (!v) return dflt;
  int64_t n = 0;
  auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), n);
  if (ec != std::errc() || p != v->data() + v->size() || n < lo || n > hi) {
    return Status::InvalidField(
        name, "must be an integer from " + std::to_string(lo) + " to " + std::to_string(hi));
  }
  return n;
}

Result<uint64_t> ParseId(const std::string& s, const char* what) {
  uint64_t id = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), id);
  if (ec != std::errc() || p != s.data() + s.size() || id == 0) {
    return Status::InvalidField("id", std::string("must be a positive integer ") + what + " id");
  }
  return id;
}

namespace {
constexpr size_t kMaxBodyValueBytes = 4096;
}  // namespace

Result<engine::ListFilter> ParseListFilter(const Query& q,
                                           std::initializer_list<std::string_view> more,
                                           const std::string& prefix) {
  static constexpr std::string_view kKnown[] = {"topic",      "state", "key_prefix", "due_after",
                                                "due_before", "error", "body_field", "body_value"};
  for (const auto& [name, value] : q) {
    if (std::find(std::begin(kKnown), std::end(kKnown), name) == std::end(kKnown) &&
        std::find(more.begin(), more.end(), name) == more.end()) {
      return Status::InvalidField(prefix + name,
                                  prefix.empty() ? "unknown query parameter" : "unknown field");
    }
  }
  engine::ListFilter f;
  if (auto t = QueryValue(q, "topic")) {
    if (Status s = CheckTopicName(*t); !s.ok())
      return Status::InvalidField(prefix + "topic", s.message());
    f.topic = *t;
  }
  if (auto s = QueryValue(q, "state")) {
    f.state = engine::ParseState(*s);
    if (!f.state) {
      return Status::InvalidField(prefix + "state",
                                  "must be one of delayed, ready, reserved, buried, done");
    }
  }
  if (auto p = QueryValue(q, "key_prefix")) f.key_prefix = *p;
  if (auto e = QueryValue(q, "error")) f.error_contains = *e;
  auto body_value = QueryValue(q, "body_value");
  if (auto field = QueryValue(q, "body_field")) {
    auto path = ParseJsonPath(*field, prefix + "body_field");
    if (!path.ok()) return path.status();
    if (body_value && body_value->size() > kMaxBodyValueBytes) {
      return Status::InvalidField(
          prefix + "body_value",
          "must be at most " + std::to_string(kMaxBodyValueBytes) + " bytes");
    }
    f.body = JsonFieldTest{std::move(*path), body_value};
  } else if (body_value) {
    return Status::InvalidField(prefix + "body_value", "needs body_field, the field to compare");
  }
  for (const char* name : {"due_after", "due_before"}) {
    if (auto v = QueryValue(q, name)) {
      auto at = ParseRfc3339(*v);
      if (!at) return Status::InvalidField(prefix + name, "must be an RFC 3339 date-time");
      (std::string_view(name) == "due_after" ? f.due_after_ms : f.due_before_ms) = *at;
    }
  }
  return f;
}

Status CheckTopicName(const std::string& name) {
  static constexpr std::string_view kAllowed =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-+/;.$_()";
  if (name.empty() || name.size() > 200 || name.front() == '-' ||
      name.find_first_not_of(kAllowed) != std::string::npos) {
    return Status::InvalidField("topic",
                                "must be 1-200 characters of letters, digits and -+/;.$_() "
                                "(beanstalkd's tube names), not starting with -");
  }
  return Status::Ok();
}

std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (;;) {
    size_t end = s.find(sep, start);
    out.push_back(s.substr(start, end - start));
    if (end == s.npos) return out;
    start = end + 1;
  }
}

}  // namespace delayd::http
