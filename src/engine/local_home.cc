#include "engine/local_home.h"

#include "engine/engine.h"

namespace delayd::engine {

Status LocalHome::Recover() { return e_.RecoverHorizon(); }

uint64_t LocalHome::NextId() { return e_.next_id_++; }

void LocalHome::Reserve(Client* c, int64_t timeout_ms) { e_.ReserveFromMemory(c, timeout_ms); }

void LocalHome::Readied(Tube* t, const Job*) { e_.Serve(t); }

void LocalHome::WriteHeld(Job* j, store::Mutation m, Done committed, Done reply) {
  e_.Write(j, std::move(m),
           [committed = std::move(committed), reply = std::move(reply)](const Status& s) {
             if (committed) committed(s);
             reply(s);
           });
}

void LocalHome::ReservedById(Job* j, Reply<JobView> done) { done(e_.View(*j)); }

// Memory holds every job but the delayed ones due beyond the loaded minute
// (or within it, past the loader's cursor), and the ready and buried ones
// beyond their windows (windows.cc). The caller knows the job is not in
// memory.
bool LocalHome::IsFar(const store::JobRecord& r) const {
  if (r.state == store::StoredState::kReady || r.state == store::StoredState::kBuried) {
    return e_.window_ > 0;
  }
  const int64_t minute = store::DueMinute(r.due_ms);
  return r.state == store::StoredState::kDelayed &&
         (minute > e_.loaded_minute_ ||
          (minute == e_.loaded_minute_ && !e_.load_done_ && r.id > e_.load_cursor_));
}

// A far job is delayed, which every caller of FindOrLoad accepts; a cold
// one is ready or buried, which some do not (it then stays in memory, in
// its set, until its window looks at it).
Result<Job*> LocalHome::Bring(const store::JobRecord& r,
                              const std::function<bool(const Job&)>& allowed) {
  if (r.state == store::StoredState::kDelayed) return e_.MaterializeFar(r);
  Job* j = e_.MaterializeCold(r, /*emit=*/false);
  if (!allowed(*j)) return Status::Conflict("job is " + std::string(StateName(j->state)));
  return j;
}

void LocalHome::FindBuried(uint64_t id, Reply<Job*> done) {
  e_.FindOrLoad(
      id, [](const Job& j) { return j.state == JobState::kBuried; },
      [done = std::move(done)](Result<Job*> found) {
        if (!found.ok() && found.status().code() == StatusCode::kConflict) {
          return done(Status::Conflict("not buried"));
        }
        done(std::move(found));
      },
      nullptr);
}

void LocalHome::Kick(Client* c, uint64_t bound, Reply<uint64_t> done) {
  e_.KickTube(c, c->use->name, bound, std::nullopt, std::move(done));
}

void LocalHome::PeekReady(Client* c, Reply<JobView> done) {
  e_.PeekFirst(c, store::JobSet::kReady, std::move(done));
}

void LocalHome::PeekBuried(Client* c, Reply<JobView> done) {
  e_.PeekFirst(c, store::JobSet::kBuried, std::move(done));
}

void LocalHome::PeekDelayed(const std::string& tube, Reply<JobView> done) {
  e_.PeekDelayedHere(tube, std::move(done));
}

void LocalHome::StatsTube(const std::string& name, Reply<TubeStats> done) {
  done(e_.StatsTube(name));
}

void LocalHome::Stats(Reply<EngineStats> done) { done(e_.Stats()); }

void LocalHome::TubeNames(Reply<std::vector<std::string>> done) { done(e_.TubeNames()); }

void LocalHome::Topics(std::optional<std::string> name, Reply<std::vector<TopicInfo>> done) {
  if (!name) return done(e_.Topics());
  Result<TopicInfo> t = e_.Topic(*name);
  if (!t.ok() && t.status().code() != StatusCode::kNotFound) return done(t.status());
  std::vector<TopicInfo> out;
  if (t.ok()) out.push_back(std::move(t).value());
  done(std::move(out));
}

}  // namespace delayd::engine
