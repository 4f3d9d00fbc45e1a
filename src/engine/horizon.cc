// The horizon: memory holds delayed jobs due within it, the store the rest.
// Recovery, the loader that brings each minute into memory as it nears, and
// reaching a job beyond the horizon (ReadFar, FindOrLoad).
#include <spdlog/spdlog.h>

#include "engine/engine.h"
#include "engine/spec_codec.h"

namespace delayd::engine {

using store::JobRecord;
using store::StoredState;

Status Engine::Recover() { return home_->Recover(); }

Status Engine::RecoverHorizon() {
  const int64_t now_ms = clock_.WallMillis();
  const int64_t horizon_minute = store::DueMinute(now_ms + options_.horizon_ms);
  auto r = store_.Recover(horizon_minute);
  if (!r.ok()) return r.status();
  loaded_minute_ = horizon_minute;
  load_done_ = true;
  window_ = store_.ScansSets() ? options_.ready_window : 0;
  bury_seq_ = std::max(bury_seq_, r->max_bury_seq);
  for (const JobRecord& rec : r->jobs) {
    if (rec.state == StoredState::kDone || !Sound(rec)) continue;  // done: never recovered
    Place(AddJob(rec, JobState::kReady), rec.state);
  }
  // Ready and buried jobs: the window of each set (every job, with none).
  if (Status s = RecoverSets(r->sets); !s.ok()) return s;
  for (const store::TubeSettings& ts : r->settings) {
    FindOrMakeTube(ts.tube)->settings = DecodeSettings(ts.settings);
  }
  for (const store::FarCount& f : r->far) {
    Tube* t = FindOrMakeTube(f.tube);
    t->far_delayed += f.delayed;
    CountDue(t, f.hour, static_cast<int64_t>(f.delayed));
  }
  const int64_t steady_us = clock_.SteadyMicros();
  for (const store::TubePause& p : r->pauses) {
    Tube* t = FindTube(p.tube);
    if (t == nullptr || p.unpause_ms <= now_ms) continue;
    if (p.unpause_ms > store::kMaxWallMs || p.pause_ms < 0) {
      ++unsound_rows_;
      spdlog::error("store: tube {}'s pause until {} ms is out of range; the tube is not paused",
                    p.tube.substr(0, 200), p.unpause_ms);
      continue;
    }
    t->pause_ms = p.pause_ms;
    t->unpause_us = steady_us + (p.unpause_ms - now_ms) * 1000;
    Schedule(t->timer, TickAtSteady(t->unpause_us));
  }
  next_id_ = r->next_id;
  ScheduleLoader();
  uint64_t far = 0;
  for (const store::FarCount& f : r->far) far += f.delayed;
  uint64_t cold = 0;
  for (const auto& t : tubes_) {
    for (const Window& w : t->windows) cold += w.cold;
  }
  spdlog::info(
      "recovered {} jobs in memory, {} beyond the horizon, {} ready or buried beyond the windows, "
      "next id {}",
      jobs_.size(), far, cold, next_id_);
  return Status::Ok();
}

void Engine::ScheduleLoader() {
  if (!load_done_) {
    Schedule(loader_timer_, NowTick());  // next chunk on the next turn of the loop
    return;
  }
  const int64_t next_start_ms = (loaded_minute_ + 1) * store::kMillisPerMinute;
  Schedule(loader_timer_, TickAtWall((next_start_ms - options_.horizon_ms) * 1000));
}

// The loader's read goes aside (on PostgreSQL it is answered from a thread
// of its own); Loaded takes the rows, and schedules the next step.
void Engine::LoadStep() {
  if (loading_) return;
  if (load_done_) {
    ++loaded_minute_;
    load_cursor_ = 0;
    load_done_ = false;
  }
  loading_ = true;
  Aside([&store = store_, minute = loaded_minute_, after = load_cursor_,
         limit = options_.load_chunk] { return store.LoadMinute(minute, after, limit); },
        [this](Result<std::vector<JobRecord>> rows, uint64_t since) {
          Loaded(std::move(rows), since);
        });
}

void Engine::Loaded(Result<std::vector<JobRecord>> rows, uint64_t since) {
  loading_ = false;
  if (!rows.ok()) {
    if (!load_failing_) {
      spdlog::error("loader: reading minute {}: {}; retrying every second", loaded_minute_,
                    rows.status().ToString());
    }
    load_failing_ = true;
    Schedule(loader_timer_, TickAtSteady(clock_.SteadyMicros() + 1'000'000));
    return;
  }
  if (load_failing_) spdlog::info("loader: reading minute {} again", loaded_minute_);
  load_failing_ = false;
  for (const JobRecord& r : rows.value()) {
    load_cursor_ = r.id;
    // In memory already: pinned by a write, or taken out of the store's
    // hands by a kick, reserve-job or delete. Or it was, and has left memory
    // since the store read this row: the row is out of date.
    if (jobs_.count(r.id) || LeftSince(r.id, since) || !Sound(r)) continue;
    Place(MaterializeFar(r), StoredState::kDelayed);
  }
  if (rows->size() < options_.load_chunk) load_done_ = true;
  ScheduleLoader();
}

void Engine::ReadFar(uint64_t id, Reply<std::optional<JobRecord>> done) {
  if (jobs_.count(id)) return done(std::optional<JobRecord>());
  Aside([&store = store_, id] { return store.Get(id); },
        [this, id, done = std::move(done)](Result<std::optional<JobRecord>> r,
                                           uint64_t since) mutable {
          if (jobs_.count(id)) return done(std::optional<JobRecord>());
          // It was in memory meanwhile, and may have changed since this read.
          if (LeftSince(id, since)) return ReadFar(id, std::move(done));
          if (!r.ok()) return done(r.status());
          if (!r.value() || !IsFar(*r.value()) || !Sound(*r.value())) {
            return done(std::optional<JobRecord>());
          }
          done(std::move(r).value());
        });
}

void Engine::FindOrLoad(uint64_t id, std::function<bool(const Job&)> allowed, Reply<Job*> done,
                        Client* c) {
  auto found = [this, id, allowed]() -> std::optional<Result<Job*>> {
    Job* j = FindLive(id);
    if (j == nullptr) return std::nullopt;
    if (!allowed(*j)) return Status::Conflict("job is " + std::string(StateName(j->state)));
    return j;
  };
  if (auto r = found()) return done(std::move(*r));
  if (c != nullptr) Pin(c);
  ReadFar(id,
          [this, found, allowed, c, done = std::move(done)](Result<std::optional<JobRecord>> far) {
            if (c != nullptr && !Unpin(c)) return done(Status::Unavailable("the client hung up"));
            if (auto r = found()) return done(std::move(*r));  // came into memory meanwhile
            if (!far.ok()) return done(far.status());
            if (!far.value()) return done(Status::NotFound("no such job"));
            done(home_->Bring(**far, allowed));
          });
}

void Engine::Doubt(Job* j) {
  ++j->pending_writes;  // held by in_doubt_ until ReadInDoubt settles it
  in_doubt_.insert(j->id);
  if (!reading_in_doubt_) Schedule(in_doubt_timer_, NowTick());
}

// The store has each job in doubt or it has not: placed as a put answered
// well would have placed it, or dropped. While it cannot be read, the jobs
// wait in memory, unseen, and the read is tried again every second.
void Engine::ReadInDoubt() {
  if (in_doubt_.empty() || reading_in_doubt_) return;
  reading_in_doubt_ = true;
  std::vector<uint64_t> ids(in_doubt_.begin(), in_doubt_.end());
  Aside(
      [&store = store_, ids]() -> Result<std::vector<std::pair<uint64_t, bool>>> {
        std::vector<std::pair<uint64_t, bool>> found;
        for (uint64_t id : ids) {
          auto r = store.Get(id);
          if (!r.ok()) return r.status();
          found.emplace_back(id, r->has_value());
        }
        return found;
      },
      [this](Result<std::vector<std::pair<uint64_t, bool>>> found, uint64_t) {
        reading_in_doubt_ = false;
        if (!found.ok()) {
          Schedule(in_doubt_timer_, TickAtSteady(clock_.SteadyMicros() + 1'000'000));
          return;
        }
        for (auto [id, kept] : *found) {
          in_doubt_.erase(id);
          Job* j = jobs_.at(id).get();
          spdlog::info("job {}: its insert's outcome was unknown; the store {} it", id,
                       kept ? "has" : "does not have");
          Publish(j, kept ? Status::Ok() : Status::IoError("not kept"));
          WriteDone(j);
        }
        if (!in_doubt_.empty()) Schedule(in_doubt_timer_, NowTick());
      });
}

bool Engine::Sound(const JobRecord& r) {
  std::string fault = store::RecordFault(r);
  if (fault.empty() && jobs_.count(r.id) != 0) fault = "its id is another job's";
  if (fault.empty()) return true;
  // The first few in full; then one line in a thousand, so that a damaged
  // table does not flood the log.
  if (++unsound_rows_ <= 10 || unsound_rows_ % 1000 == 0) {
    spdlog::error(
        "store: job row {} (tube \"{}\") left out of memory: {}; it stays in the store as it is "
        "({} such rows so far)",
        r.id, r.tube.substr(0, 200), fault, unsound_rows_);
  }
  return false;
}

Job* Engine::MaterializeFar(const JobRecord& r) {
  Job* j = AddJob(r, JobState::kDelayed);
  if (j->tube->far_delayed > 0) --j->tube->far_delayed;
  CountDue(j->tube, store::DueHour(r.due_ms), -1);
  return j;
}

}  // namespace delayd::engine
