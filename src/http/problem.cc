// The API's answers: JSON bodies, and failures as problem+json (RFC 9457)
// with one slug and HTTP status per status code.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <charconv>
#include <random>

#include "common/json_dump.h"
#include "http/api.h"

namespace delayd::http {

using nlohmann::json;

namespace {

struct ProblemKind {
  int http;
  const char* slug;
  const char* title;
};

ProblemKind KindOf(StatusCode c) {
  switch (c) {
    case StatusCode::kOk:
      return {200, "ok", "OK"};
    case StatusCode::kNotFound:
      return {404, "not-found", "Not found"};
    case StatusCode::kInvalidArgument:
      return {400, "invalid-request", "Invalid request"};
    case StatusCode::kConflict:
      return {409, "conflict", "Conflict with the job's state"};
    case StatusCode::kUnavailable:
    case StatusCode::kFenced:  // this node no longer owns the shard: another node will
      return {503, "unavailable", "Unavailable, try again later"};
    case StatusCode::kIoError:  // the store failed: nothing was applied; retry later
      return {503, "storage-unavailable",
              "Storage unavailable, nothing was changed; try again later"};
    case StatusCode::kNoSpace:
      return {503, "storage-full",
              "Storage full, nothing was changed; try again once space returns"};
    case StatusCode::kUnknown:  // look the jobs up before submitting again
      return {503, "outcome-unknown",
              "The store's connection broke during the commit; the jobs may have been kept"};
    case StatusCode::kInternal:
      break;
  }
  return {500, "internal", "Internal error"};
}

}  // namespace

Response Problem(int status, const char* slug, const std::string& title, const std::string& detail,
                 const std::string& field) {
  json j = {{"type", std::string("https://delayd.dev/problems/") + slug},
            {"title", title},
            {"status", status},
            {"detail", detail}};
  if (!field.empty()) j["field"] = field;
  Response r;
  r.status = status;
  r.content_type = "application/problem+json";
  r.body = DumpJson(j);
  return r;
}

Response JsonResponse(int status, const json& body) {
  return JsonTextResponse(status, DumpJson(body));
}

Response JsonTextResponse(int status, std::string text) {
  Response r;
  r.status = status;
  r.body = std::move(text);
  return r;
}

Response ProblemResponse(const Status& s) {
  ProblemKind k = KindOf(s.code());
  if (s.code() == StatusCode::kIoError || s.code() == StatusCode::kNoSpace ||
      s.code() == StatusCode::kInternal) {
    // The store's own words (SQL, file names) stay in the log; the client
    // gets an id to find them by.
    const std::string id = NewRequestId();
    spdlog::warn("request {}: {}", id, s.message());
    Response r = Problem(k.http, k.slug, k.title,
                         std::string(k.title) + " (request " + id + " in the server's log)");
    r.headers.emplace_back("Delayd-Request-Id", id);
    return r;
  }
  if (s.code() == StatusCode::kUnknown) {
    // The ids to look up (GET /v1/jobs/{id}) before submitting again; a
    // resubmission without a key could otherwise make a second job.
    json j = {{"type", "https://delayd.dev/problems/outcome-unknown"},
              {"title", k.title},
              {"status", k.http},
              {"detail", s.message()},
              {"job_ids", json::array()}};
    for (std::string_view rest = s.field(); !rest.empty();) {
      const size_t comma = rest.find(',');
      uint64_t id = 0;
      std::from_chars(rest.data(), rest.data() + std::min(comma, rest.size()), id);
      if (id != 0) j["job_ids"].push_back(id);
      rest = comma == rest.npos ? std::string_view() : rest.substr(comma + 1);
    }
    Response r;
    r.status = k.http;
    r.content_type = "application/problem+json";
    r.body = DumpJson(j);
    return r;
  }
  return Problem(k.http, k.slug, k.title, s.message(), s.field());
}

std::string NewRequestId() {
  static std::atomic<uint64_t> next{0};
  static const uint64_t base = [] {
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32 | rd()) & 0xffffff000000ULL;
  }();
  return fmt::format("{:012x}", base + next.fetch_add(1) % 0x1000000);
}

}  // namespace delayd::http
