// The engine's side of push delivery: the dispatcher reserves due push jobs
// through TakePush and reports each delivery through PushDone.
#include "engine/engine.h"

namespace delayd::engine {

using store::JobRecord;
using store::Mutation;

std::optional<PushLease> Engine::TakePush(const std::string& topic) {
  Tube* t = FindTube(topic);
  if (t == nullptr || Paused(t) || t->push_ready.empty()) return std::nullopt;
  Job* j = *t->push_ready.begin();
  // The reservation outlives the request's own timeout, so it runs out only
  // when the dispatcher is gone (it then returns to ready and is redelivered).
  Hold(j, push_holder_, j->extra->spec->target->timeout_ms + options_.push_ttr_margin_ms);
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

void Engine::PushDone(uint64_t id, const Attempt& a, int64_t retry_delay_ms, Done done) {
  Job* j = FindLive(id);
  if (j == nullptr || j->state != JobState::kReserved || j->reserver != push_holder_ ||
      j->counters.reserves != a.number) {
    return done(Status::Conflict("the delivery's reservation ran out"));
  }
  if (!j->extra) j->extra = std::make_unique<JobExtra>();
  if (!a.error.empty()) j->extra->last_error = a.error;
  AppendAttempt(j->extra->attempt_log, a, options_.attempt_log_size);
  // Lost to a power cut, any of these brings back a delivery, like a release
  // or bury over beanstalk.
  switch (a.outcome) {
    case AttemptOutcome::kOk:
      return Finish(j, std::move(done));
    case AttemptOutcome::kRetry:
      return Requeue(j, j->priority, retry_delay_ms, std::move(done));
    case AttemptOutcome::kDead:
      return BuryHeld(j, j->priority, std::move(done));
  }
}

std::vector<std::string> Engine::PushReadyTopics() const {
  std::vector<std::string> out;
  for (auto& t : tubes_) {
    if (!t->push_ready.empty() && !Paused(t.get())) out.push_back(t->name);
  }
  return out;
}

}  // namespace delayd::engine
