// The horizon: memory holds delayed jobs due within it, the store the rest.
// Recovery, the loader that brings each minute into memory as it nears, and
// reaching a job beyond the horizon (FindFar, FindOrLoad).
#include <spdlog/spdlog.h>

#include "engine/engine.h"
#include "engine/spec_json.h"

namespace delayd::engine {

using store::JobRecord;
using store::StoredState;

Status Engine::Recover() {
  const int64_t now_ms = clock_.WallMillis();
  const int64_t horizon_minute = store::DueMinute(now_ms + options_.horizon_ms);
  auto r = store_.Recover(horizon_minute);
  if (!r.ok()) return r.status();
  loaded_minute_ = horizon_minute;
  load_done_ = true;
  for (const JobRecord& rec : r->jobs) {
    Job* j = AddJob(rec, JobState::kReady);
    switch (rec.state) {
      case StoredState::kBuried:
        MakeBuried(j);
        break;
      case StoredState::kDelayed:
        if (rec.due_ms > now_ms) {
          MakeDelayed(j);
          break;
        }
        [[fallthrough]];
      case StoredState::kReady:
        MakeReady(j);
        break;
      case StoredState::kDone:  // never recovered
        break;
    }
  }
  for (const store::TubeSettings& ts : r->settings) {
    FindOrMakeTube(ts.tube)->settings = DecodeSettings(ts.settings);
  }
  for (const store::FarCount& f : r->far) FindOrMakeTube(f.tube)->far_delayed += f.delayed;
  const int64_t steady_us = clock_.SteadyMicros();
  for (const store::TubePause& p : r->pauses) {
    Tube* t = FindTube(p.tube);
    if (t == nullptr || p.unpause_ms <= now_ms) continue;
    t->pause_ms = p.pause_ms;
    t->unpause_us = steady_us + (p.unpause_ms - now_ms) * 1000;
    Schedule(t->timer, TickAtSteady(t->unpause_us));
  }
  next_id_ = r->next_id;
  ScheduleLoader();
  spdlog::info(
      "recovered {} jobs in memory, {} beyond the horizon, next id {}", jobs_.size(),
      [&] {
        uint64_t n = 0;
        for (auto& f : r->far) n += f.delayed;
        return n;
      }(),
      next_id_);
  return Status::Ok();
}

void Engine::ScheduleLoader() {
  if (!load_done_) {
    Schedule(loader_timer_, NowTick());  // next chunk on the next turn of the loop
    return;
  }
  const int64_t next_start_ms = (loaded_minute_ + 1) * store::kMillisPerMinute;
  Schedule(loader_timer_, TickAtWall(next_start_ms - options_.horizon_ms));
}

// The loader's read goes to the store without waiting (on PostgreSQL it is
// answered from a thread of its own); Loaded takes the rows, and schedules
// the next step.
void Engine::LoadStep() {
  if (loading_) return;
  if (load_done_) {
    ++loaded_minute_;
    load_cursor_ = 0;
    load_done_ = false;
  }
  loading_ = true;
  store_.LoadMinuteAsync(loaded_minute_, load_cursor_, options_.load_chunk,
                         [this](Result<std::vector<JobRecord>> rows) { Loaded(std::move(rows)); });
}

void Engine::Loaded(Result<std::vector<JobRecord>> rows) {
  loading_ = false;
  std::unordered_set<uint64_t> left;
  left.swap(left_while_loading_);
  if (!rows.ok()) {
    if (!load_failing_) {
      spdlog::error("loader: reading minute {}: {}; retrying every second", loaded_minute_,
                    rows.status().ToString());
    }
    load_failing_ = true;
    Schedule(loader_timer_, NowTick() + 1000);
    return;
  }
  if (load_failing_) spdlog::info("loader: reading minute {} again", loaded_minute_);
  load_failing_ = false;
  const int64_t now_ms = clock_.WallMillis();
  for (const JobRecord& r : rows.value()) {
    load_cursor_ = r.id;
    // In memory already: pinned by a write, or taken out of the store's
    // hands by a kick, reserve-job or delete. Or it was, and has left memory
    // since the store read this row: the row is out of date.
    if (jobs_.count(r.id) || left.count(r.id)) continue;
    Job* j = MaterializeFar(r);
    if (j->due_ms <= now_ms) {
      MakeReady(j);
    } else {
      MakeDelayed(j);
    }
  }
  if (rows->size() < options_.load_chunk) load_done_ = true;
  ScheduleLoader();
}

Result<std::optional<JobRecord>> Engine::FindFar(uint64_t id) {
  if (jobs_.count(id)) return std::optional<JobRecord>();
  auto r = store_.Get(id);
  if (!r.ok()) return r.status();
  std::optional<JobRecord>& rec = r.value();
  if (!rec) return std::optional<JobRecord>();
  const int64_t minute = store::DueMinute(rec->due_ms);
  const bool far = rec->state == StoredState::kDelayed &&
                   (minute > loaded_minute_ ||
                    (minute == loaded_minute_ && !load_done_ && rec->id > load_cursor_));
  if (!far) return std::optional<JobRecord>();
  return std::move(rec);
}

Result<Job*> Engine::FindOrLoad(uint64_t id, const std::function<bool(const Job&)>& allowed) {
  if (Job* j = FindLive(id)) {
    if (!allowed(*j)) return Status::Conflict("job is " + std::string(StateName(j->state)));
    return j;
  }
  auto far = FindFar(id);
  if (!far.ok()) return far.status();
  if (!far.value()) return Status::NotFound("no such job");
  return MaterializeFar(**far);  // delayed, which every caller accepts
}

Job* Engine::MaterializeFar(const JobRecord& r) {
  Job* j = AddJob(r, JobState::kDelayed);
  if (j->tube->far_delayed > 0) --j->tube->far_delayed;
  return j;
}

}  // namespace delayd::engine
