// The API's topic routes (list, get, settings, pause and resume) and the
// server's stats.
#include "common/json_dump.h"
#include "common/json_text.h"
#include "delivery/dispatcher.h"
#include "engine/spec_json.h"
#include "http/api.h"
#include "http/api_util.h"

namespace delayd::http {

using nlohmann::json;

// ---------------------------------------------------------------- topics

json Api::RenderTopic(const engine::TopicInfo& t) const {
  json j = t.settings ? engine::ToJson(*t.settings, false)
                      : engine::ToJson(engine::TopicSettings{}, false);
  j["name"] = t.name;
  j["paused"] = t.paused;
  j["counts"] = {{"ready", t.ready},
                 {"delayed", t.delayed},
                 {"reserved", t.reserved},
                 {"buried", t.buried},
                 {"total_jobs", t.total_jobs}};
  j["pause_left_ms"] = t.pause_left_ms;
  // How late the longest-waiting ready job is: rate limits and busy
  // consumers show here.
  j["ready_lateness_ms"] =
      t.oldest_ready_due_ms ? std::max<int64_t>(0, clock_.WallMillis() - t.oldest_ready_due_ms) : 0;
  j["in_flight"] = dispatcher_ ? dispatcher_->in_flight(t.name) : 0;
  return j;
}

void Api::ListTopics(Call& c) {
  engine_.Topics([this, reply = std::move(c.reply)](Result<std::vector<engine::TopicInfo>> r) {
    if (!r.ok()) return reply(ProblemResponse(r.status()));
    json out = json::array();
    for (const auto& t : *r) out.push_back(RenderTopic(t));
    reply(JsonResponse(200, {{"topics", std::move(out)}}));
  });
}

void Api::GetTopic(Call& c) { ReplyTopic(std::move(c.reply), c.params[0]); }

void Api::ReplyTopic(Reply reply, const std::string& name) {
  engine_.Topic(name, [this, reply = std::move(reply)](Result<engine::TopicInfo> t) {
    if (!t.ok()) return reply(ProblemResponse(t.status()));
    reply(JsonResponse(200, RenderTopic(*t)));
  });
}

void Api::PutTopic(Call& c) {
  auto body = ParseBody(c.req, true);
  if (!body.ok()) return c.reply(ProblemResponse(body.status()));
  auto parsed = engine::ParseTopicSettings(*body);
  if (!parsed.ok()) return c.reply(ProblemResponse(parsed.status()));
  for (auto [url, field] :
       {std::pair{parsed->target ? &parsed->target->url : nullptr, "target.url"},
        {parsed->alert ? &parsed->alert->webhook : nullptr, "alert.webhook"}}) {
    if (url == nullptr) continue;
    if (Status s = CheckTargetUrl(options_.limits, *url, field); !s.ok()) {
      return c.reply(ProblemResponse(s));
    }
  }
  // The secret is write-only: a PUT without it keeps the one set.
  if (!body->contains("signing_secret")) {
    if (auto old = engine_.SettingsOf(c.params[0])) parsed->signing_secret = old->signing_secret;
  }
  auto settings = std::make_shared<const engine::TopicSettings>(std::move(*parsed));
  std::optional<bool> paused;
  if (body->contains("paused")) paused = (*body)["paused"].get<bool>();
  std::string name = c.params[0];
  engine_.SetTopicSettings(name, settings,
                           [this, name, paused, reply = std::move(c.reply)](const Status& s) {
                             if (!s.ok()) return reply(ProblemResponse(s));
                             auto answer = [this, name, reply](const Status& st) {
                               if (!st.ok()) return reply(ProblemResponse(st));
                               ReplyTopic(reply, name);
                             };
                             auto t = engine_.Topic(name);
                             if (paused && t.ok() && *paused != t->paused) {
                               if (*paused)
                                 return engine_.PauseTube(name, engine::kPauseForeverMs, answer);
                               return engine_.ResumeTube(name, answer);
                             }
                             answer(Status::Ok());
                           });
}

void Api::PauseTopic(Call& c, bool pause) {
  auto body = ParseBody(c.req, false);
  if (!body.ok()) return c.reply(ProblemResponse(body.status()));
  int64_t for_ms = engine::kPauseForeverMs;
  for (auto& [k, v] : body->items()) {
    if (k == "for_ms" && pause) {
      auto ms = engine::ParseMillis(v, "for_ms");
      if (!ms.ok()) return c.reply(ProblemResponse(ms.status()));
      if (*ms < 1 || *ms > engine::kPauseForeverMs) {
        return c.reply(ProblemResponse(Status::InvalidField("for_ms", "must be at least 1 ms")));
      }
      for_ms = *ms;
    } else {
      return c.reply(ProblemResponse(Status::InvalidField(k, "unknown field")));
    }
  }
  std::string name = c.params[0];
  auto answer = [this, name, reply = std::move(c.reply)](const Status& s) {
    if (!s.ok()) return reply(ProblemResponse(s));
    ReplyTopic(reply, name);
  };
  if (pause) return engine_.PauseTube(name, for_ms, std::move(answer));
  engine_.ResumeTube(name, std::move(answer));
}

void Api::Stats(Call& c) {
  // In cluster mode the job counts are the cluster's, read from the database.
  engine_.Stats([this, reply = std::move(c.reply)](Result<engine::EngineStats> r) {
    if (!r.ok()) return reply(ProblemResponse(r.status()));
    const engine::EngineStats& e = *r;
    json j = {{"version", options_.version},
              {"jobs",
               {{"ready", e.ready},
                {"delayed", e.delayed},
                {"reserved", e.reserved},
                {"buried", e.buried},
                {"total_submitted", e.total_jobs},
                {"ttr_timeouts", e.job_timeouts}}},
              {"topics", e.tubes},
              {"waiting_consumers", e.waiting},
              {"draining", e.draining},
              {"unsound_rows", engine_.unsound_rows()}};
    if (dispatcher_ != nullptr) {
      delivery::DispatcherStats d = dispatcher_->stats();
      j["delivery"] = {
          {"delivered", d.delivered},       {"failed_attempts", d.failed},
          {"dead_letters", d.dead_letters}, {"in_flight", d.in_flight},
          {"alerts_sent", d.alerts_sent},   {"alerts_suppressed", d.alerts_suppressed}};
    }
    if (server_stats_) j["server"] = server_stats_();
    reply(JsonResponse(200, j));
  });
}

}  // namespace delayd::http
