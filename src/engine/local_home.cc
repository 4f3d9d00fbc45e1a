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
// (or within it, past the loader's cursor).
bool LocalHome::IsFar(const store::JobRecord& r) const {
  const int64_t minute = store::DueMinute(r.due_ms);
  return r.state == store::StoredState::kDelayed &&
         (minute > e_.loaded_minute_ ||
          (minute == e_.loaded_minute_ && !e_.load_done_ && r.id > e_.load_cursor_));
}

// A far job is delayed, which every caller of FindOrLoad accepts.
Result<Job*> LocalHome::Bring(const store::JobRecord& r, const std::function<bool(const Job&)>&) {
  return e_.MaterializeFar(r);
}

// Buried jobs are all in memory.
void LocalHome::FindBuried(uint64_t id, Reply<Job*> done) {
  Job* j = e_.FindLive(id);
  if (j == nullptr) return done(Status::NotFound("no such job"));
  if (j->state != JobState::kBuried) return done(Status::Conflict("not buried"));
  done(j);
}

void LocalHome::Kick(Client* c, uint64_t bound, Reply<uint64_t> done) {
  e_.KickTube(c->use->name, bound, std::nullopt, std::move(done));
}

void LocalHome::PeekReady(Client* c, Reply<JobView> done) { done(e_.PeekReady(c)); }

void LocalHome::PeekBuried(Client* c, Reply<JobView> done) { done(e_.PeekBuried(c)); }

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
