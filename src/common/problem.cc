#include "common/problem.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <random>
#include <string_view>

namespace delayd {

namespace {

struct Kind {
  int http;
  const char* slug;
  const char* title;
};

Kind KindOf(StatusCode c) {
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

Problem ProblemOf(const Status& s) {
  const Kind k = KindOf(s.code());
  Problem p;
  p.http_status = k.http;
  p.slug = k.slug;
  p.title = k.title;
  switch (s.code()) {
    case StatusCode::kIoError:
    case StatusCode::kNoSpace:
    case StatusCode::kInternal:
      // The store's own words stay in the log; the client gets an id to
      // find them by.
      p.request_id = NewRequestId();
      spdlog::warn("request {}: {}", p.request_id, s.message());
      p.detail = p.title + " (request " + p.request_id + " in the server's log)";
      break;
    case StatusCode::kUnknown:
      // field() holds the ids ("12,13"); a resubmission without a key could
      // otherwise make a second job.
      p.detail = s.message();
      for (std::string_view rest = s.field(); !rest.empty();) {
        const size_t comma = rest.find(',');
        uint64_t id = 0;
        std::from_chars(rest.data(), rest.data() + std::min(comma, rest.size()), id);
        if (id != 0) p.job_ids.push_back(id);
        rest = comma == rest.npos ? std::string_view() : rest.substr(comma + 1);
      }
      break;
    default:
      p.detail = s.message();
      p.field = s.field();
  }
  return p;
}

std::string NewRequestId() {
  static std::atomic<uint64_t> next{0};
  static const uint64_t base = [] {
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32 | rd()) & 0xffffff000000ULL;
  }();
  return fmt::format("{:012x}", base + next.fetch_add(1) % 0x1000000);
}

}  // namespace delayd
