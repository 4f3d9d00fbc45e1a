// libFuzzer target: the HTTP API behind the request parser (job submission
// and modification, pull, topics, timers). The input holds up to 8 requests
// separated by NUL bytes, each "METHOD target\n" followed by its body, run
// in order on a fresh engine so that later requests act on what earlier ones
// made ("POST /v1/topics/t/jobs\n[{...}]\0PATCH /v1/jobs/1\n{...}").
// Every request must get one reply with a real HTTP status, a JSON reply
// must be valid JSON, whatever the input, and a job submitted with a JSON
// body reads back with that body's text exactly.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "common/json_text.h"
#include "fuzz/harness.h"
#include "http/api.h"
#include "timer/timer_service.h"

using namespace delayd;

namespace {

std::optional<http::Request> ParseRequest(std::string_view text) {
  const size_t eol = text.find('\n');
  std::string_view line = text.substr(0, eol);
  const size_t sp = line.find(' ');
  if (sp == std::string_view::npos) return std::nullopt;
  http::Request req;
  req.method = std::string(line.substr(0, sp));
  std::string_view target = line.substr(sp + 1);
  const size_t q = target.find('?');
  req.path = std::string(target.substr(0, q));
  if (q != std::string_view::npos) req.query = std::string(target.substr(q + 1));
  req.content_type = "application/json";
  if (eol != std::string_view::npos) req.body = std::string(text.substr(eol + 1));
  return req;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::ResetScratch();
  fuzz::Core core;
  if (!core.Open().ok()) abort();
  timer::TimerService timers(*core.writes, *core.engine, core.clock, timer::TimerOptions{},
                             [](int64_t) {});
  if (!timers.Start().ok()) abort();
  auto api = std::make_unique<http::Api>(
      core.io, *core.engine, core.clock, nullptr, [] { return nlohmann::json::object(); },
      http::ApiOptions{}, &timers);

  std::string_view input(reinterpret_cast<const char*>(data), size);
  for (int n = 0; n < 8 && !input.empty(); ++n) {
    const size_t end = input.find('\0');
    std::optional<http::Request> req = ParseRequest(input.substr(0, end));
    input = end == std::string_view::npos ? std::string_view() : input.substr(end + 1);
    if (!req) continue;
    const bool submit_one = req->method == "POST" && req->path.size() > 5 &&
                            req->path.compare(req->path.size() - 5, 5, "/jobs") == 0 &&
                            req->body.find_first_not_of(" \t\r\n") != std::string::npos &&
                            req->body[req->body.find_first_not_of(" \t\r\n")] == '{';
    const std::string sent = req->body;
    std::optional<http::Response> res;
    int replies = 0;
    api->Handle(std::move(*req), [&](http::Response r) {
      ++replies;
      res = std::move(r);
    });
    // A reserve may wait for a job that never comes (time stands still).
    if (!core.RunUntil([&] { return res.has_value(); })) {
      api->EndLongPolls();
      core.RunUntil([&] { return res.has_value(); });
    }
    if (!res || replies != 1) {
      fprintf(stderr, "request %d: %d replies\n", n, replies);
      abort();  // exactly one reply
    }
    if (res->status < 200 || res->status > 599) abort();
    if (res->content_type.find("json") != std::string::npos && !res->body.empty() &&
        !nlohmann::json::accept(res->body)) {
      abort();  // a JSON reply that does not parse
    }
    if (submit_one && res->status == 201) {
      // Accepted, so `sent` is valid JSON: its body must come back as sent.
      std::optional<std::string_view> body = JsonMemberText(sent, "body");
      if (body && res->body.find("\"body\":" + std::string(*body)) == std::string::npos) {
        abort();
      }
    }
  }
  api.reset();
  return 0;
}
