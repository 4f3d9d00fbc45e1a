// The engine's side of push delivery: the dispatcher reserves due push jobs
// through TakePush and reports each delivery through PushDone.
#include <nlohmann/json.hpp>

#include "common/json_text.h"
#include "common/json_writer.h"
#include "engine/engine.h"

namespace delayd::engine {

using store::JobRecord;
using store::Mutation;

std::optional<PushLease> Engine::TakePush(const std::string& topic) {
  Tube* t = FindTube(topic);
  if (t == nullptr || Paused(t) || t->push_ready.empty()) return std::nullopt;
  Job* j = *t->push_ready.begin();
  Detach(j);
  j->state = JobState::kReserved;
  j->reserver = push_holder_;
  ++t->reserved;
  ++j->counters.reserves;
  // The reservation outlives the request's own timeout, so it runs out only
  // when the dispatcher is gone (it then returns to ready and is redelivered).
  j->deadline_us = clock_.SteadyMicros() +
                   (j->extra->spec->target->timeout_ms + options_.push_ttr_margin_ms) * 1000;
  push_holder_->reserved.insert(j);
  Schedule(j->timer, TickAtSteady(j->deadline_us));
  PushLease lease;
  lease.id = j->id;
  lease.attempt = j->counters.reserves;
  lease.topic = t->name;
  lease.due_ms = j->due_ms;
  lease.run_at_ms = j->run_at_ms;
  lease.created_ms = j->created_ms;
  lease.key = j->extra->key;
  lease.body = j->body;
  lease.spec = j->extra->spec;
  return lease;
}

void Engine::AppendAttempt(Job* j, const Attempt& a) {
  if (!j->extra) j->extra = std::make_unique<JobExtra>();
  if (!a.error.empty()) j->extra->last_error = a.error;
  std::string entry;
  JsonWriter w(entry);
  w.BeginObject();
  w.Key("attempt").Uint(j->counters.reserves);
  w.Key("started_ms").Int(a.started_ms);
  w.Key("duration_ms").Int(a.duration_ms);
  w.Key("outcome").String(a.outcome);
  w.Key("http_status").Int(a.http_status);
  w.Key("error").String(a.error);
  w.EndObject();
  // The log is a JSON array kept as text, and appending to it is text work:
  // one delivery used to parse and re-render the whole log. Only a log that
  // may have outgrown its limit (one entry per reservation) is parsed, to
  // drop its oldest entries.
  std::string& log = j->extra->attempt_log;
  if (log.size() < 2 || log.front() != '[' || log.back() != ']') {
    log = "[" + entry + "]";
  } else {
    log.pop_back();
    if (log.size() > 1) log += ',';
    log += entry;
    log += ']';
  }
  if (j->counters.reserves <= options_.attempt_log_size) return;
  // Keep the latest entries, each as the text it was written as.
  const std::vector<std::string_view> all = JsonElementTexts(log);
  if (all.size() <= options_.attempt_log_size) return;
  std::string kept = "[";
  for (size_t i = all.size() - options_.attempt_log_size; i < all.size(); ++i) {
    if (kept.size() > 1) kept += ',';
    kept += all[i];
  }
  kept += ']';
  log = std::move(kept);
}

void Engine::PushDone(uint64_t id, uint32_t attempt, const Attempt& a, bool success, bool dead,
                      int64_t retry_delay_ms, Done done) {
  Job* j = FindLive(id);
  if (j == nullptr || j->state != JobState::kReserved || j->reserver != push_holder_ ||
      j->counters.reserves != attempt) {
    return done(Status::Conflict("the delivery's reservation ran out"));
  }
  Detach(j);
  AppendAttempt(j, a);
  if (success) {
    ++j->tube->deletes;
    return Finish(j, std::move(done));
  }
  if (dead) {
    ++j->counters.buries;
    MakeBuried(j);
  } else {
    ++j->counters.releases;
    j->delay_ms = retry_delay_ms;
    j->due_ms = DueFromNow(retry_delay_ms);
    if (retry_delay_ms > 0) {
      MakeDelayed(j);
    } else {
      MakeReady(j);
    }
  }
  // Like a release or bury over beanstalk: lost, it brings back a delivery.
  Write(j, Mutation::Update(Record(*j)).Written(), std::move(done));
}

std::vector<std::string> Engine::PushReadyTopics() const {
  std::vector<std::string> out;
  for (auto& t : tubes_) {
    if (!t->push_ready.empty() && !Paused(t.get())) out.push_back(t->name);
  }
  return out;
}

}  // namespace delayd::engine
