// Writes a small real delayd.db for the recovery target's seed corpus: jobs
// in several states and encodings, a topic with settings, and timers, made
// through the HTTP API as a client would make them.
//
//   make_store_seed OUT.db
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "fuzz/harness.h"
#include "http/api.h"
#include "timer/timer_service.h"

using namespace delayd;

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: make_store_seed OUT.db\n");
    return 2;
  }
  fuzz::ResetScratch();
  {
    fuzz::Core core;
    if (!core.Open().ok()) return 1;
    timer::TimerService timers(*core.writes, *core.engine, core.clock, timer::TimerOptions{},
                               [](int64_t) {});
    if (!timers.Start().ok()) return 1;
    http::Api api(
        core.io, *core.engine, core.clock, nullptr, [] { return nlohmann::json::object(); },
        http::ApiOptions{}, &timers);
    const char* requests[][3] = {
        {"PUT", "/v1/topics/push",
         R"({"target":{"url":"http://127.0.0.1:9/hook"},"retry":{"max_attempts":3}})"},
        {"POST", "/v1/topics/push/jobs",
         R"([{"body":{"order":8812},"delay":"30m","key":"close-8812"},)"
         R"({"body_base64":"AAEC","run_at":"2026-11-22T01:00:00Z","priority":5}])"},
        {"POST", "/v1/topics/pull/jobs", R"([{"body":"now"},{"body":"later","delay":"2h"}])"},
        {"POST", "/v1/topics/pull/reserve", ""},
        {"POST", "/v1/timers",
         R"({"name":"daily","topic":"push","schedule":"0 9 * * *",)"
         R"("timezone":"Asia/Shanghai","template":{"body":{"board":"weekly"}}})"},
        {"POST", "/v1/timers",
         R"({"name":"often","topic":"pull","schedule":"@every 90s","overlap":"skip",)"
         R"("misfire":"fire_all","misfire_limit":3})"},
    };
    for (const auto& [method, path, body] : requests) {
      http::Request req;
      req.method = method;
      req.path = path;
      req.content_type = "application/json";
      req.body = body;
      std::optional<http::Response> res;
      api.Handle(std::move(req), [&](http::Response r) { res = std::move(r); });
      if (!core.RunUntil([&] { return res.has_value(); }, std::chrono::seconds(5))) return 1;
      if (res->status >= 300) {
        fprintf(stderr, "%s %s: %d %s\n", method, path, res->status, res->body.c_str());
        return 1;
      }
    }
  }  // closes the store: the WAL is checkpointed into the file
  std::filesystem::copy_file(fuzz::ScratchDir() / "delayd.db", argv[1],
                             std::filesystem::copy_options::overwrite_existing);
  std::filesystem::remove_all(fuzz::ScratchDir());
  return 0;
}
