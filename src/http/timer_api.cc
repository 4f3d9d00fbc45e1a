// The /v1/timers routes of the Api: recurring timers, their preview and
// their fire history. JSON in the shape of issue 4; errors name the field.
#include <nlohmann/json.hpp>

#include "common/json_text.h"
#include "common/json_writer.h"
#include "common/time_format.h"
#include "engine/spec_codec.h"
#include "engine/spec_json.h"
#include "http/api.h"
#include "http/api_util.h"
#include "timer/timer_service.h"

namespace delayd::http {

using nlohmann::json;
using timer::Misfire;
using timer::Overlap;
using timer::TimerInfo;
using timer::TimerSpec;

namespace {

// Fields a timer reads back with; accepted and ignored on the way in, so a
// timer read with GET can be sent back with PATCH.
bool ReadOnly(const std::string& name) {
  return name == "id" || name == "next_fire_at" || name == "last_fire_at" || name == "created_at";
}

Result<int64_t> OptionalTime(const json& v, const char* field) {
  if (v.is_null()) return int64_t{0};
  std::optional<int64_t> at;
  if (v.is_string()) at = ParseRfc3339(v.get<std::string>());
  if (!at || *at <= 0) {
    return Status::InvalidField(field, "must be null or an RFC 3339 date-time");
  }
  return *at;
}

Result<std::string> Text(const json& v, const char* field) {
  if (!v.is_string()) return Status::InvalidField(field, "must be a string");
  return v.get<std::string>();
}

// Applies the fields of `j` over `name` and `spec`. A new timer needs name,
// topic and schedule.
Status ApplyTimerJson(const json& j, std::string_view text, bool create, const JobLimits& limits,
                      int64_t now_ms, std::string& name, TimerSpec& spec) {
  if (!j.is_object()) return Status::InvalidField("body", "must be a JSON object");
  for (const char* required : {"name", "topic", "schedule"}) {
    if (create && !j.contains(required)) return Status::InvalidField(required, "is required");
  }
  for (const auto& [k, v] : j.items()) {
    if (k == "name") {
      auto t = Text(v, "name");
      if (!t.ok()) return t.status();
      name = *t;
    } else if (k == "topic") {
      auto t = Text(v, "topic");
      if (!t.ok()) return t.status();
      if (Status s = CheckTopicName(*t); !s.ok()) return s;
      spec.topic = *t;
    } else if (k == "schedule") {
      auto t = Text(v, "schedule");
      if (!t.ok()) return t.status();
      spec.schedule = *t;
    } else if (k == "timezone") {
      auto t = Text(v, "timezone");
      if (!t.ok()) return t.status();
      spec.timezone = *t;
    } else if (k == "active") {
      if (!v.is_boolean()) return Status::InvalidField("active", "must be true or false");
      spec.active = v.get<bool>();
    } else if (k == "start_at" || k == "end_at") {
      auto at = OptionalTime(v, k.c_str());
      if (!at.ok()) return at.status();
      (k == "start_at" ? spec.start_ms : spec.end_ms) = *at;
    } else if (k == "misfire") {
      const std::string m = v.is_string() ? v.get<std::string>() : "";
      if (m == "skip") {
        spec.misfire = Misfire::kSkip;
      } else if (m == "fire_once") {
        spec.misfire = Misfire::kFireOnce;
      } else if (m == "fire_all") {
        spec.misfire = Misfire::kFireAll;
      } else {
        return Status::InvalidField("misfire", "must be skip, fire_once or fire_all");
      }
    } else if (k == "misfire_limit") {
      if (!v.is_number_unsigned() || v.get<uint64_t>() < 1 || v.get<uint64_t>() > 10'000) {
        return Status::InvalidField("misfire_limit", "must be an integer from 1 to 10000");
      }
      spec.misfire_limit = v.get<uint32_t>();
    } else if (k == "overlap") {
      const std::string o = v.is_string() ? v.get<std::string>() : "";
      if (o != "allow" && o != "skip") {
        return Status::InvalidField("overlap", "must be allow or skip");
      }
      spec.overlap = o == "skip" ? Overlap::kSkip : Overlap::kAllow;
    } else if (k == "template") {
      if (!v.is_object()) return Status::InvalidField("template", "must be a JSON object");
      for (const char* own : {"key", "delay", "run_at"}) {
        if (v.contains(own)) {
          return Status::InvalidField(std::string("template.") + own,
                                      "is set by the timer at each fire");
        }
      }
      auto job = ParseNewJob(v, JsonMemberText(text, "template").value_or("{}"), "template", limits,
                             now_ms);
      if (!job.ok()) return job.status();
      spec.job = std::move(*job);
    } else if (!ReadOnly(k)) {
      return Status::InvalidField(k, "unknown field");
    }
  }
  return Status::Ok();
}

void WriteTime(JsonWriter& w, const char* key, int64_t ms) {
  w.Key(key);
  ms > 0 ? w.Time(ms) : w.Null();
}

std::string RenderTimer(const TimerInfo& t) {
  const TimerSpec& s = t.spec;
  std::string out;
  JsonWriter w(out);
  w.BeginObject();
  w.Key("id").Uint(t.record.id);
  w.Key("name").String(t.record.name);
  w.Key("topic").String(s.topic);
  w.Key("schedule").String(s.schedule);
  w.Key("timezone").String(s.timezone);
  w.Key("active").Bool(s.active);
  WriteTime(w, "start_at", s.start_ms);
  WriteTime(w, "end_at", s.end_ms);
  w.Key("misfire").String(timer::MisfireName(s.misfire));
  w.Key("misfire_limit").Uint(s.misfire_limit);
  w.Key("overlap").String(timer::OverlapName(s.overlap));
  w.Key("template").BeginObject();
  WriteBody(w, s.job.body, s.job.spec.encoding);
  w.Key("priority").Uint(s.job.priority);
  w.Key("ttr_ms").Int(s.job.ttr_ms);
  w.Key("target");
  s.job.spec.target ? engine::WriteJson(w, *s.job.spec.target) : w.Null();
  w.Key("retry");
  s.job.spec.retry ? engine::WriteJson(w, *s.job.spec.retry) : w.Null();
  WriteTraceContext(w, &s.job.spec);
  w.EndObject();
  WriteTime(w, "next_fire_at", t.record.next_fire_ms);
  WriteTime(w, "last_fire_at", t.record.last_fire_ms);
  w.Key("created_at").Time(t.record.created_ms);
  w.EndObject();
  return out;
}

std::string RenderTimes(const std::vector<int64_t>& times) {
  std::string out;
  JsonWriter w(out);
  w.BeginObject().Key("fire_times").BeginArray();
  for (int64_t t : times) w.Time(t);
  w.EndArray().EndObject();
  return out;
}

}  // namespace

void Api::ReplyTimer(const Reply& reply, Result<TimerInfo> r, int status) {
  if (!r.ok()) return reply(ProblemResponse(r.status()));
  reply(JsonTextResponse(status, RenderTimer(*r)));
}

void Api::CreateTimer(Call& c) {
  auto body = ParseBody(c.req, true);
  if (!body.ok()) return c.reply(ProblemResponse(body.status()));
  std::string name;
  TimerSpec spec;
  Status s =
      ApplyTimerJson(*body, c.req.body, true, options_.limits, clock_.WallMillis(), name, spec);
  if (!s.ok()) return c.reply(ProblemResponse(s));
  TakeTraceContext(c.req, &spec.job.spec);  // each fire's job carries it
  timers_->Create(std::move(name), std::move(spec),
                  [this, reply = std::move(c.reply)](Result<TimerInfo> r) {
                    ReplyTimer(reply, std::move(r), 201);
                  });
}

void Api::ListTimers(Call& c) {
  auto limit = QueryInt(c.query, "limit", 1, 1000, 100);
  if (!limit.ok()) return c.reply(ProblemResponse(limit.status()));
  auto cursor = QueryInt(c.query, "cursor", 0, INT64_MAX, 0);
  if (!cursor.ok()) return c.reply(ProblemResponse(cursor.status()));
  const size_t n = static_cast<size_t>(*limit);
  timers_->List(static_cast<uint64_t>(*cursor), n + 1,
                [n, reply = std::move(c.reply)](Result<std::vector<TimerInfo>> page) {
                  if (!page.ok()) return reply(ProblemResponse(page.status()));
                  const bool more = page->size() > n;
                  if (more) page->pop_back();
                  std::string out = "{\"timers\":[";
                  for (size_t i = 0; i < page->size(); ++i) {
                    out += (i ? "," : "") + RenderTimer((*page)[i]);
                  }
                  out += "],\"next_cursor\":";
                  out += more ? "\"" + std::to_string(page->back().record.id) + "\"" : "null";
                  out += "}";
                  reply(JsonTextResponse(200, std::move(out)));
                });
}

void Api::GetTimer(Call& c) {
  auto id = ParseId(c.params[0], "timer");
  if (!id.ok()) return c.reply(ProblemResponse(id.status()));
  timers_->Get(*id, [this, reply = std::move(c.reply)](Result<TimerInfo> r) {
    ReplyTimer(reply, std::move(r));
  });
}

void Api::PatchTimer(Call& c) {
  auto id = ParseId(c.params[0], "timer");
  if (!id.ok()) return c.reply(ProblemResponse(id.status()));
  auto body = ParseBody(c.req, true);
  if (!body.ok()) return c.reply(ProblemResponse(body.status()));
  Request trace;  // the update's trace context, if it has one
  trace.traceparent = std::move(c.req.traceparent);
  trace.tracestate = std::move(c.req.tracestate);
  timers_->Get(*id, [this, id = *id, body = std::move(*body), text = c.req.body,
                     trace = std::move(trace),
                     reply = std::move(c.reply)](Result<TimerInfo> current) {
    if (!current.ok()) return reply(ProblemResponse(current.status()));
    std::string name = current->record.name;
    TimerSpec spec = current->spec;
    Status s = ApplyTimerJson(body, text, false, options_.limits, clock_.WallMillis(), name, spec);
    if (!s.ok()) return reply(ProblemResponse(s));
    // A new template keeps the timer's trace context; an update that
    // brings one replaces it.
    spec.job.spec.traceparent = current->spec.job.spec.traceparent;
    spec.job.spec.tracestate = current->spec.job.spec.tracestate;
    TakeTraceContext(trace, &spec.job.spec);
    timers_->Replace(id, std::move(name), std::move(spec),
                     [this, reply](Result<TimerInfo> r) { ReplyTimer(reply, std::move(r)); });
  });
}

void Api::DeleteTimer(Call& c) {
  auto id = ParseId(c.params[0], "timer");
  if (!id.ok()) return c.reply(ProblemResponse(id.status()));
  timers_->Delete(*id, [reply = std::move(c.reply)](const Status& s) {
    if (!s.ok()) return reply(ProblemResponse(s));
    Response r;
    r.status = 204;
    reply(std::move(r));
  });
}

void Api::SetTimerActive(Call& c, bool active) {
  auto id = ParseId(c.params[0], "timer");
  if (!id.ok()) return c.reply(ProblemResponse(id.status()));
  timers_->SetActive(*id, active, [this, reply = std::move(c.reply)](Result<TimerInfo> r) {
    ReplyTimer(reply, std::move(r));
  });
}

void Api::NextFires(Call& c) {
  auto id = ParseId(c.params[0], "timer");
  if (!id.ok()) return c.reply(ProblemResponse(id.status()));
  auto count = QueryInt(c.query, "count", 1, 1000, 10);
  if (!count.ok()) return c.reply(ProblemResponse(count.status()));
  timers_->Get(*id, [this, count = static_cast<size_t>(*count),
                     reply = std::move(c.reply)](Result<TimerInfo> t) {
    if (!t.ok()) return reply(ProblemResponse(t.status()));
    auto times =
        timer::TimerService::Preview(t->spec, clock_.WallMillis(), t->record.created_ms, count);
    if (!times.ok()) return reply(ProblemResponse(times.status()));
    reply(JsonTextResponse(200, RenderTimes(*times)));
  });
}

void Api::PreviewTimer(Call& c) {
  auto body = ParseBody(c.req, true);
  if (!body.ok()) return c.reply(ProblemResponse(body.status()));
  size_t count = 10;
  json j = *body;
  if (j.is_object() && j.contains("count")) {
    const json& n = j["count"];
    if (!n.is_number_unsigned() || n.get<uint64_t>() < 1 || n.get<uint64_t>() > 1000) {
      return c.reply(
          ProblemResponse(Status::InvalidField("count", "must be an integer from 1 to 1000")));
    }
    count = n.get<size_t>();
    j.erase("count");
  }
  // A preview needs only the schedule; the rest may be given as for a timer.
  std::string name = "preview";
  TimerSpec spec;
  spec.topic = "preview";
  if (j.is_object() && !j.contains("schedule")) {
    return c.reply(ProblemResponse(Status::InvalidField("schedule", "is required")));
  }
  const int64_t now = clock_.WallMillis();
  Status s = ApplyTimerJson(j, c.req.body, false, options_.limits, now, name, spec);
  if (s.ok()) s = timer::TimerService::Validate(name, spec);
  if (!s.ok()) return c.reply(ProblemResponse(s));
  auto times = timer::TimerService::Preview(spec, now, now, count);
  if (!times.ok()) return c.reply(ProblemResponse(times.status()));
  c.reply(JsonTextResponse(200, RenderTimes(*times)));
}

void Api::TimerFires(Call& c) {
  auto id = ParseId(c.params[0], "timer");
  if (!id.ok()) return c.reply(ProblemResponse(id.status()));
  auto limit = QueryInt(c.query, "limit", 1, store::kTimerFiresKept, 20);
  if (!limit.ok()) return c.reply(ProblemResponse(limit.status()));
  const uint64_t timer_id = *id;
  auto render = [this, timer_id, reply = c.reply](std::vector<store::TimerFire> fires) {
    std::vector<uint64_t> jobs;
    for (const store::TimerFire& f : fires) jobs.push_back(f.job_id);
    // What became of each fire's job: its state now, or null once it is gone.
    engine_.GetJobs(jobs, [timer_id, reply, fires](std::vector<Result<engine::JobInfo>> infos) {
      std::string out;
      JsonWriter w(out);
      w.BeginObject().Key("timer_id").Uint(timer_id).Key("fires").BeginArray();
      for (size_t i = 0; i < fires.size(); ++i) {
        const store::TimerFire& f = fires[i];
        const Result<engine::JobInfo>& job = infos[i];
        w.BeginObject();
        w.Key("fire_at").Time(f.fire_ms);
        w.Key("outcome").String(f.outcome);
        w.Key("handled_at").Time(f.at_ms);
        w.Key("job_id");
        f.job_id ? w.Uint(f.job_id) : w.Null();
        w.Key("job_state");
        const bool found = f.job_id != 0 && job.ok();
        found ? w.String(engine::StateName(job->state)) : w.Null();
        if (found && !job->record.last_error.empty()) {
          w.Key("job_last_error").String(job->record.last_error);
        }
        w.EndObject();
      }
      w.EndArray().EndObject();
      reply(JsonTextResponse(200, std::move(out)));
    });
  };
  timers_->Get(timer_id, [this, timer_id, limit = static_cast<size_t>(*limit), render,
                          reply = std::move(c.reply)](Result<TimerInfo> t) {
    if (!t.ok()) return reply(ProblemResponse(t.status()));
    timers_->Fires(timer_id, limit, [render, reply](Result<std::vector<store::TimerFire>> fires) {
      if (!fires.ok()) return reply(ProblemResponse(fires.status()));
      render(std::move(fires).value());
    });
  });
}

}  // namespace delayd::http
