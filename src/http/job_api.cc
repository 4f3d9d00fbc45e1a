// The API's job routes: submit, get, list, change, cancel, act on one job,
// and its attempts.
#include "common/json_dump.h"
#include "common/json_text.h"
#include "common/time_format.h"
#include "engine/spec_json.h"
#include "http/api.h"
#include "http/api_util.h"
#include "http/job_json.h"

namespace delayd::http {

using nlohmann::json;

void Api::ReplyJob(const Reply& reply, uint64_t id, int status) {
  engine_.GetJob(id, [reply, status](Result<engine::JobInfo> info) {
    if (!info.ok()) return reply(ProblemResponse(info.status()));
    reply(JsonTextResponse(status, RenderJob(*info)));
  });
}

// ---------------------------------------------------------------- jobs

void Api::SubmitJobs(Call& c) {
  auto body = ParseBody(c.req, true);
  if (!body.ok()) return c.reply(ProblemResponse(body.status()));
  const bool batch = body->is_array();
  if (batch && body->empty()) {
    return c.reply(ProblemResponse(Status::InvalidField("body", "a batch holds at least one job")));
  }
  if (batch && body->size() > options_.max_batch) {
    return c.reply(ProblemResponse(Status::InvalidField(
        "body", "a batch holds at most " + std::to_string(options_.max_batch) + " jobs")));
  }
  // A delay counts from the next whole ms: from the current one, rounded
  // down, a job would be due up to 1 ms before its delay has passed.
  const int64_t now_ms = (clock_.WallMicros() + 999) / 1000;
  std::vector<engine::NewJob> jobs;
  if (batch) {
    const std::vector<std::string_view> texts = JsonElementTexts(c.req.body);
    for (size_t i = 0; i < body->size(); ++i) {
      auto n = ParseNewJob((*body)[i], texts.at(i), "[" + std::to_string(i) + "]", options_.limits,
                           now_ms);
      if (!n.ok()) return c.reply(ProblemResponse(n.status()));
      TakeTraceContext(c.req, &n->spec);
      jobs.push_back(std::move(*n));
    }
  } else {
    auto n = ParseNewJob(*body, c.req.body, "", options_.limits, now_ms);
    if (!n.ok()) return c.reply(ProblemResponse(n.status()));
    TakeTraceContext(c.req, &n->spec);
    jobs.push_back(std::move(*n));
  }
  engine_.Submit(
      c.params[0], std::move(jobs),
      [this, batch, reply = std::move(c.reply)](Result<std::vector<engine::Submitted>> r) {
        if (!r.ok()) return reply(ProblemResponse(r.status()));
        std::vector<uint64_t> ids;
        for (const engine::Submitted& s : *r) ids.push_back(s.id);
        // New jobs are still in memory; a duplicate's job may have to be read.
        engine_.GetJobs(std::move(ids), [batch, reply, submitted = std::move(r).value()](
                                            std::vector<Result<engine::JobInfo>> infos) {
          std::string out;
          out.reserve(infos.size() * 512);  // a job renders to ~400 bytes plus its body
          JsonWriter w(out);
          if (batch) w.BeginArray();
          bool any_new = false, all_dup = true;
          for (size_t i = 0; i < infos.size(); ++i) {
            if (!infos[i].ok()) return reply(ProblemResponse(infos[i].status()));
            w.BeginObject();
            WriteJobFields(w, *infos[i]);
            w.Key("duplicate").Bool(submitted[i].duplicate);
            w.EndObject();
            any_new = any_new || !submitted[i].duplicate;
            all_dup = all_dup && submitted[i].duplicate;
          }
          if (batch) w.EndArray();
          Response res = JsonTextResponse(any_new ? 201 : 200, std::move(out));
          if (!batch) {
            res.headers.emplace_back("Location", "/v1/jobs/" + std::to_string(submitted[0].id));
          }
          if (all_dup) res.headers.emplace_back("Delayd-Duplicate", "true");
          reply(std::move(res));
        });
      });
}

void Api::GetJob(Call& c) {
  auto id = ParseId(c.params[0], "job");
  if (!id.ok()) return c.reply(ProblemResponse(id.status()));
  ReplyJob(c.reply, *id);
}

void Api::GetByKey(Call& c) {
  engine_.GetByKey(c.params[0], c.params[1],
                   [reply = std::move(c.reply)](Result<engine::JobInfo> info) {
                     if (!info.ok()) return reply(ProblemResponse(info.status()));
                     reply(JsonTextResponse(200, RenderJob(*info)));
                   });
}

void Api::PatchJob(Call& c) {
  auto id = ParseId(c.params[0], "job");
  if (!id.ok()) return c.reply(ProblemResponse(id.status()));
  auto body = ParseBody(c.req, true);
  if (!body.ok()) return c.reply(ProblemResponse(body.status()));
  auto patch =
      ParseJobPatch(*body, c.req.body, options_.limits, (clock_.WallMicros() + 999) / 1000);
  if (!patch.ok()) return c.reply(ProblemResponse(patch.status()));
  engine_.Modify(*id, *patch, [this, id = *id, reply = std::move(c.reply)](const Status& s) {
    if (!s.ok()) return reply(ProblemResponse(s));
    ReplyJob(reply, id);
  });
}

void Api::DeleteJob(Call& c) {
  auto id = ParseId(c.params[0], "job");
  if (!id.ok()) return c.reply(ProblemResponse(id.status()));
  engine_.Remove(*id, [reply = std::move(c.reply)](const Status& s) {
    if (!s.ok()) return reply(ProblemResponse(s));
    Response r;
    r.status = 204;
    reply(std::move(r));
  });
}

void Api::ListJobs(Call& c) {
  auto filter = ParseListFilter(c.query, {"limit", "cursor"});
  if (!filter.ok()) return c.reply(ProblemResponse(filter.status()));
  engine::ListFilter& f = *filter;
  auto limit = QueryInt(c.query, "limit", 1, 1000, 100);
  if (!limit.ok()) return c.reply(ProblemResponse(limit.status()));
  f.limit = static_cast<size_t>(*limit);
  auto cursor = QueryInt(c.query, "cursor", 0, INT64_MAX, 0);
  if (!cursor.ok()) return c.reply(ProblemResponse(cursor.status()));
  f.after_id = static_cast<uint64_t>(*cursor);
  engine_.List(f, [reply = std::move(c.reply)](Result<engine::ListPage> page) {
    if (!page.ok()) return reply(ProblemResponse(page.status()));
    std::string out;
    JsonWriter w(out);
    w.BeginObject().Key("jobs").BeginArray();
    for (const auto& info : page->jobs) {
      w.BeginObject();
      WriteJobFields(w, info);
      w.EndObject();
    }
    w.EndArray().Key("next_cursor");
    page->next_cursor ? w.String(std::to_string(page->next_cursor)) : w.Null();
    w.EndObject();
    reply(JsonTextResponse(200, std::move(out)));
  });
}

void Api::Action(Call& c, const std::string& action) {
  auto id = ParseId(c.params[0], "job");
  if (!id.ok()) return c.reply(ProblemResponse(id.status()));
  auto then = [this, id = *id, reply = std::move(c.reply)](const Status& s) {
    if (!s.ok()) return reply(ProblemResponse(s));
    ReplyJob(reply, id);
  };
  if (action == "run-now") return engine_.RunNow(*id, std::move(then));
  if (action == "kick") return engine_.KickJob(*id, std::move(then));
  engine_.Retry(*id, std::move(then));
}

void Api::Attempts(Call& c) {
  auto id = ParseId(c.params[0], "job");
  if (!id.ok()) return c.reply(ProblemResponse(id.status()));
  engine_.GetJob(*id, [id = *id, reply = std::move(c.reply)](Result<engine::JobInfo> info) {
    if (!info.ok()) return reply(ProblemResponse(info.status()));
    json out = json::array();
    for (const engine::Attempt& a : engine::ReadAttempts(info->record.attempt_log)) {
      out.push_back({{"attempt", a.number},
                     {"started_at", FormatRfc3339Ms(a.started_ms)},
                     {"duration_ms", a.duration_ms},
                     {"outcome", engine::OutcomeName(a.outcome)},
                     {"http_status", a.http_status != 0 ? json(a.http_status) : json(nullptr)},
                     {"error", a.error.empty() ? json(nullptr) : json(a.error)},
                     {"parent_id", a.parent_id.empty() ? json(nullptr) : json(a.parent_id)}});
    }
    reply(JsonResponse(200, {{"job_id", id}, {"attempts", std::move(out)}}));
  });
}

}  // namespace delayd::http
