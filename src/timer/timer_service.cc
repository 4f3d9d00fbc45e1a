#include "timer/timer_service.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "engine/timer_key.h"

namespace delayd::timer {

using store::Mutation;
using store::TimerFire;
using store::TimerRecord;

namespace {

// How long after a failed load of timers (the store unreachable) the next is tried.
constexpr int64_t kLoadRetryMs = 1000;

// A name held by another timer: a conflict with the state of the server
// (409), not a malformed request.
Status NameTaken() { return Status::ConflictField("name", "is taken by another timer"); }

std::string FireKey(uint64_t id, int64_t fire_ms) { return engine::TimerFireKey(id, fire_ms); }

// A timer read by id: kNotFound when there is none.
Result<TimerRecord> Found(Result<std::optional<TimerRecord>> row) {
  if (!row.ok()) return row.status();
  if (!row->has_value()) return Status::NotFound("no such timer");
  return std::move(**row);
}

}  // namespace

TimerService::TimerService(store::Store& store, engine::Engine& engine, const Clock& clock,
                           TimerOptions options, WakeFn wake)
    : store_(store), engine_(engine), clock_(clock), options_(options), wake_(std::move(wake)) {}

TimerService::~TimerService() {
  if (subscription_ != 0) engine_.Unsubscribe(subscription_);
}

Status TimerService::Start() {
  // A fire's job that ended no longer holds back the next fire under the
  // overlap policy, and the timer need not ask the engine (or the store,
  // once the job is gone from memory) about it.
  subscription_ = engine_.Subscribe([this](const engine::JobEvent& e) {
    if (e.kind != engine::JobEventKind::kEnded) return;
    auto job = timer_of_job_.find(e.job_id);
    if (job == timer_of_job_.end()) return;
    auto t = loaded_.find(job->second);
    if (t != loaded_.end() && t->second.last_job_id == e.job_id) t->second.last_job_id = 0;
    timer_of_job_.erase(job);
  });
  if (shared_ == nullptr) {
    Result<uint64_t> next = store_.NextTimerId();
    if (!next.ok()) return next.status();
    next_id_ = *next;
  }
  Load(clock_.WallMillis());
  ArmWake();
  return Status::Ok();
}

// ---------------------------------------------------------------- schedule

Result<std::shared_ptr<const TimerService::Compiled>> TimerService::Compile(const TimerSpec& spec) {
  Result<cron::Schedule> schedule = cron::Schedule::Parse(spec.schedule);
  if (!schedule.ok()) return schedule.status();
  Result<cron::Zone> zone = cron::FindZone(spec.timezone);
  if (!zone.ok()) return zone.status();
  auto c = std::make_shared<Compiled>();
  c->spec = spec;
  c->schedule = *schedule;
  c->zone = *zone;
  return std::shared_ptr<const Compiled>(std::move(c));
}

int64_t TimerService::NextFire(const Compiled& c, int64_t after_ms, int64_t created_ms) {
  const TimerSpec& s = c.spec;
  if (s.start_ms > 0) after_ms = std::max(after_ms, s.start_ms - 1);
  std::optional<int64_t> next =
      c.schedule.Next(after_ms, c.zone, s.start_ms > 0 ? s.start_ms : created_ms);
  if (!next || (s.end_ms > 0 && *next > s.end_ms)) return 0;
  return *next;
}

Status TimerService::Validate(const std::string& name, const TimerSpec& spec) {
  return Check(name, spec).status();
}

Result<std::shared_ptr<const TimerService::Compiled>> TimerService::Check(const std::string& name,
                                                                          const TimerSpec& spec) {
  if (name.empty() || name.size() > 200) {
    return Status::InvalidField("name", "must be 1-200 characters");
  }
  if (spec.topic.empty() || spec.topic.size() > 200) {
    return Status::InvalidField("topic", "must be 1-200 characters");
  }
  if (spec.end_ms > 0 && spec.start_ms > 0 && spec.end_ms <= spec.start_ms) {
    return Status::InvalidField("end_at", "must be after start_at");
  }
  if (spec.misfire_limit == 0) {
    return Status::InvalidField("misfire_limit", "must be at least 1");
  }
  return Compile(spec);
}

Result<std::vector<int64_t>> TimerService::Preview(const TimerSpec& spec, int64_t after_ms,
                                                   int64_t anchor_ms, size_t count) {
  auto c = Compile(spec);
  if (!c.ok()) return c.status();
  std::vector<int64_t> out;
  int64_t at = after_ms;
  while (out.size() < count) {
    at = NextFire(**c, at, anchor_ms);
    if (at == 0) break;
    out.push_back(at);
  }
  return out;
}

// ---------------------------------------------------------------- memory

TimerService::Row TimerService::ReadRow(store::Store& store, TimerRecord r) {
  Row row{std::move(r), 0};
  auto spec = DecodeTimerSpec(row.record.definition);
  if (spec.ok() && spec->overlap == Overlap::kSkip) {
    auto fires = store.TimerFires(row.record.id, 1);
    if (fires.ok() && !fires->empty()) row.last_job_id = fires->front().job_id;
  }
  return row;
}

void TimerService::Load(int64_t now_ms) {
  const int64_t until = now_ms + options_.horizon_ms;
  if (loading_ || until <= loaded_until_ms_ || now_ms < load_retry_ms_) return;
  loading_ = true;
  // Pages on (next fire, id) from the old window's end.
  const int64_t from_ms = loaded_until_ms_ - 1;
  // The first load takes every overdue timer.
  const uint64_t after_id = loaded_until_ms_ == 0 ? 0 : static_cast<uint64_t>(INT64_MAX);
  std::vector<int> shards = owned_.shards();  // cluster mode: the owned ones
  Aside(
      [&store = store_, q = shared_, shards, from_ms, after_id, until,
       chunk = options_.load_chunk]() mutable -> Result<std::vector<Row>> {
        std::vector<Row> rows;
        int64_t from = from_ms;
        uint64_t after = after_id;
        for (;;) {
          auto page = q != nullptr ? q->TimersDueOf(shards, from, after, until, chunk)
                                   : store.TimersDue(from, after, until, chunk);
          if (!page.ok()) return page.status();
          for (TimerRecord& r : *page) {
            from = r.next_fire_ms;
            after = r.id;
            rows.push_back(ReadRow(store, std::move(r)));
          }
          if (page->size() < chunk) return rows;
        }
      },
      [this, until, now_ms, generation = owned_generation_](Result<std::vector<Row>> rows,
                                                            uint64_t since) {
        LoadRead(std::move(rows), since, until, now_ms, generation);
      });
}

void TimerService::LoadRead(Result<std::vector<Row>> rows, uint64_t since, int64_t until,
                            int64_t now_ms, uint64_t owned_generation) {
  loading_ = false;
  if (!rows.ok()) {
    if (!load_failing_) {
      spdlog::error("timers: loading: {}; retrying every {} ms", rows.status().ToString(),
                    kLoadRetryMs);
    }
    load_failing_ = true;
    load_retry_ms_ = now_ms + kLoadRetryMs;
    ArmWake();
    return;
  }
  std::vector<uint64_t> again = HoldRows(*rows, since, until);
  // Shards taken meanwhile were not in this read: their window is not loaded.
  if (owned_generation == owned_generation_) loaded_until_ms_ = until;
  // A timer changed meanwhile and let go (its next fire was beyond the old
  // window) may fire within the new one: read it again.
  for (uint64_t id : changed_.ChangedIdsSince(since)) {
    if (!loaded_.count(id) && std::find(again.begin(), again.end(), id) == again.end()) {
      again.push_back(id);
    }
  }
  if (!again.empty()) Reload(std::move(again));
  if (load_failing_) spdlog::info("timers: loading again");
  load_failing_ = false;
  ArmWake();
}

void TimerService::Reload(std::vector<uint64_t> ids) {
  Aside(
      [&store = store_, ids]() -> Result<std::vector<Row>> {
        std::vector<Row> rows;
        for (uint64_t id : ids) {
          auto r = store.GetTimer(id);
          if (!r.ok()) return r.status();
          if (r->has_value()) rows.push_back(ReadRow(store, std::move(**r)));
        }
        return rows;
      },
      [this, ids](Result<std::vector<Row>> rows, uint64_t since) {
        if (!rows.ok()) {
          // The window is as if never loaded for these: load it again.
          spdlog::warn("timers: reading changed timers again: {}", rows.status().ToString());
          loaded_until_ms_ = 0;
          ArmWake();
          return;
        }
        std::vector<uint64_t> again = HoldRows(*rows, since);
        if (!again.empty()) Reload(std::move(again));
        ArmWake();
      });
}

std::vector<uint64_t> TimerService::HoldRows(const std::vector<Row>& rows, uint64_t since,
                                             int64_t window_end_ms) {
  std::vector<uint64_t> again;
  for (const Row& row : rows) {
    if (loaded_.count(row.record.id)) continue;
    // Changed since the read: the row may be older than the change.
    if (changed_.ChangedSince(row.record.id, since)) {
      again.push_back(row.record.id);
    } else {
      HoldRow(row, window_end_ms);
    }
  }
  return again;
}

void TimerService::HoldRow(const Row& row, int64_t window_end_ms) {
  const TimerRecord& r = row.record;
  auto spec = DecodeTimerSpec(r.definition);
  auto compiled =
      spec.ok() ? Compile(*spec) : Result<std::shared_ptr<const Compiled>>(spec.status());
  if (!compiled.ok()) {
    spdlog::error("timers: timer {} ({}) cannot run: {}", r.id, r.name,
                  compiled.status().ToString());
    return;
  }
  Hold(r, *compiled, row.last_job_id, window_end_ms);
}

void TimerService::Hold(const TimerRecord& record, std::shared_ptr<const Compiled> compiled,
                        uint64_t last_job_id, int64_t window_end_ms) {
  if (window_end_ms == 0) window_end_ms = loaded_until_ms_;
  if (record.next_fire_ms == 0 || record.next_fire_ms >= window_end_ms || !Owns(record.id)) {
    Drop(record.id);
    return;
  }
  Loaded& t = loaded_[record.id];
  if (!t.in_flight) due_.erase({t.process_at_ms, record.id});
  t.record = record;
  t.compiled = std::move(compiled);
  t.generation = ++generation_;
  SetLastJob(record.id, t, last_job_id);
  t.in_flight = false;
  Queue(t, record.next_fire_ms - Lead(record));
}

int64_t TimerService::Lead(const TimerRecord& r) const {
  const int64_t previous = r.last_fire_ms > 0 ? r.last_fire_ms : r.created_ms;
  return std::clamp((r.next_fire_ms - previous) / 4, int64_t{0}, options_.lead_ms);
}

void TimerService::Drop(uint64_t id) {
  changed_.Changed(id);
  auto it = loaded_.find(id);
  if (it == loaded_.end()) return;
  due_.erase({it->second.process_at_ms, id});
  timer_of_job_.erase(it->second.last_job_id);
  loaded_.erase(it);
}

void TimerService::SetLastJob(uint64_t timer_id, Loaded& t, uint64_t job_id) {
  if (t.last_job_id != 0) timer_of_job_.erase(t.last_job_id);
  t.last_job_id = job_id;
  if (job_id != 0) timer_of_job_[job_id] = timer_id;
}

void TimerService::Queue(Loaded& t, int64_t at_ms) {
  t.process_at_ms = at_ms;
  due_.insert({at_ms, t.record.id});
}

void TimerService::ArmWake(bool force) {
  // The next window step, or the retry of a failed load; while a load's read
  // is out, only fires (its answer arms the next step).
  int64_t at = loading_ ? INT64_MAX
                        : std::max(loaded_until_ms_ - options_.horizon_ms + 1000, load_retry_ms_);
  if (!due_.empty()) at = std::min(at, due_.begin()->first);
  if (at == INT64_MAX) {
    armed_ms_ = -1;  // nothing to wake for
    return;
  }
  if (force || armed_ms_ < 0 || at != armed_ms_) {
    armed_ms_ = at;
    if (wake_) wake_(at);
  }
}

// ---------------------------------------------------------------- firing

void TimerService::Tick() {
  const int64_t now = clock_.WallMillis();
  Load(now);
  while (!due_.empty() && due_.begin()->first <= now) {
    const uint64_t id = due_.begin()->second;
    due_.erase(due_.begin());
    Fire(loaded_.at(id), now);
  }
  ArmWake(true);
}

void TimerService::Fire(Loaded& t, int64_t now) {
  if (t.compiled->spec.overlap != Overlap::kSkip || t.last_job_id == 0) {
    return FireNow(t, now, false);
  }
  // Whether the previous fire's job still runs: the engine may have to read it.
  t.in_flight = true;
  engine_.GetJob(t.last_job_id, [this, id = t.record.id, generation = t.generation,
                                 now](Result<engine::JobInfo> info) {
    auto it = loaded_.find(id);
    if (it == loaded_.end() || it->second.generation != generation) return;  // changed meanwhile
    const bool running = info.ok() && info->state != engine::JobState::kBuried &&
                         info->state != engine::JobState::kDone;
    FireNow(it->second, now, running);
    ArmWake();
  });
}

void TimerService::FireNow(Loaded& t, int64_t now, bool still_running) {
  const Compiled& c = *t.compiled;
  const TimerSpec& spec = c.spec;
  const uint64_t id = t.record.id;
  // Cluster mode: the advance commits only while this node holds the
  // shard's lease (else the whole fire is refused, and nothing created).
  store::change::Fence fence;
  if (!Owns(id, &fence)) return Drop(id);
  auto advance = [this, id, fence](int64_t next, int64_t last, std::vector<TimerFire> records) {
    Mutation m = Mutation::TimerAdvance(id, next, last, std::move(records));
    return shared_ != nullptr ? std::move(m).FencedBy(fence) : m;
  };
  const int64_t first = t.record.next_fire_ms;
  const int64_t missed_before = now - options_.misfire_grace_ms;
  std::vector<int64_t> fire_times;
  std::vector<TimerFire> records;
  int64_t next = 0;
  if (first < missed_before) {
    // Missed while down or paused: the misfire policy decides.
    switch (spec.misfire) {
      case Misfire::kSkip:
        records.push_back({id, first, 0, "skipped-misfire", now});
        break;
      case Misfire::kFireOnce:
        fire_times.push_back(first);
        break;
      case Misfire::kFireAll:
        for (int64_t f = first;
             f != 0 && f < missed_before && fire_times.size() < spec.misfire_limit;
             f = NextFire(c, f, t.record.created_ms)) {
          fire_times.push_back(f);
        }
        break;
    }
    next = NextFire(c, missed_before - 1, t.record.created_ms);
  } else {
    fire_times.push_back(first);
    next = NextFire(c, first, t.record.created_ms);
  }
  if (spec.overlap == Overlap::kSkip && !fire_times.empty() && still_running) {
    records.push_back({id, fire_times.front(), 0, "skipped-overlap", now});
    fire_times.clear();
  }
  const int64_t last = fire_times.empty() ? first : std::max(first, fire_times.back());
  t.in_flight = true;
  const uint64_t generation = t.generation;
  if (fire_times.empty()) {
    store_.Submit(advance(next, last, std::move(records)),
                  [this, id, generation, next, last](const Status& s) {
                    Fired(id, generation, s, next, last, 0);
                  });
    return;
  }
  std::vector<engine::NewJob> jobs;
  for (int64_t f : fire_times) {
    engine::NewJob j = spec.job;
    j.key = FireKey(id, f);
    // The fire time as the job's requested time: the engine makes a late
    // (catch-up) fire due now, and the job still says which fire it was.
    j.run_at_ms = f;
    jobs.push_back(std::move(j));
  }
  auto fired_job = std::make_shared<uint64_t>(0);
  engine_.Submit(
      spec.topic, std::move(jobs),
      [this, id, generation, next, last, fired_job](Result<std::vector<engine::Submitted>> r) {
        Fired(id, generation, r.status(), next, last, *fired_job);
      },
      [id, next, last, now, fire_times, records = std::move(records), fired_job,
       advance](const std::vector<engine::Submitted>& out) mutable {
        for (size_t i = 0; i < out.size(); ++i) {
          records.push_back(
              {id, fire_times[i], out[i].id, out[i].duplicate ? "duplicate" : "created", now});
          *fired_job = out[i].id;
        }
        std::vector<Mutation> ms;
        ms.push_back(advance(next, last, std::move(records)));
        return ms;
      });
}

void TimerService::Fired(uint64_t id, uint64_t generation, const Status& s, int64_t next_ms,
                         int64_t last_ms, uint64_t job_id) {
  auto it = loaded_.find(id);
  if (it == loaded_.end() || it->second.generation != generation) return;  // changed meanwhile
  Loaded& t = it->second;
  t.in_flight = false;
  if (s.ok()) {
    t.record.next_fire_ms = next_ms;
    t.record.last_fire_ms = last_ms;
    if (job_id != 0) SetLastJob(id, t, job_id);
    if (next_ms == 0 || next_ms >= loaded_until_ms_) {
      Drop(id);
    } else {
      Queue(t, next_ms - Lead(t.record));
    }
  } else if (s.code() == StatusCode::kFenced) {
    // The lease moved before this node heard: the shard's timers are the
    // next owner's, and none of them fires here until the lease is held again.
    spdlog::info("timers: timer {} is the shard's next owner's (lease lost)", id);
    if (store::change::Fence fence; Owns(id, &fence)) refused_[fence.shard] = fence.epoch;
    Drop(id);
  } else if (s.code() == StatusCode::kConflict) {
    // The store knows better (this fire time was recorded, or the timer is
    // gone): take its row as it is.
    Aside([&store = store_, id] { return store.GetTimer(id); },
          [this, id, generation](Result<std::optional<TimerRecord>> row, uint64_t) {
            auto now = loaded_.find(id);
            if (now == loaded_.end() || now->second.generation != generation) return;
            if (row.ok() && row->has_value()) {
              Hold(**row, now->second.compiled, now->second.last_job_id);
            } else {
              Drop(id);
            }
            ArmWake();
          });
  } else {
    spdlog::warn("timers: timer {} fire at {} not stored, retrying: {}", id, t.record.next_fire_ms,
                 s.ToString());
    Queue(t, clock_.WallMillis() + options_.retry_ms);
  }
  ArmWake();
}

// ---------------------------------------------------------------- the API

void TimerService::Put(TimerRecord record, std::shared_ptr<const Compiled> compiled,
                       InfoDone done) {
  // Whatever was in memory is outdated from here on.
  Drop(record.id);
  auto rec = std::make_shared<TimerRecord>(std::move(record));
  store_.Submit(Mutation::TimerPut(*rec),
                [this, rec, compiled, done = std::move(done)](const Status& s) {
                  if (!s.ok()) {
                    if (s.code() == StatusCode::kConflict)
                      return done(NameTaken());  // a racing create
                    return done(s);
                  }
                  Hold(*rec, compiled, 0);
                  ArmWake();
                  done(TimerInfo{*rec, compiled->spec});
                });
}

void TimerService::Create(std::string name, TimerSpec spec, InfoDone done) {
  auto compiled = Check(name, spec);
  if (!compiled.ok()) return done(compiled.status());
  store::ReadAsync(
      store_, [&store = store_, name] { return store.GetTimerByName(name); },
      [this, name, spec, compiled = *compiled,
       done = std::move(done)](Result<std::optional<TimerRecord>> taken) mutable {
        if (!taken.ok()) return done(taken.status());
        if (taken->has_value()) return done(NameTaken());
        NewId([this, name = std::move(name), spec, compiled,
               done = std::move(done)](Result<uint64_t> id) mutable {
          if (!id.ok()) return done(id.status());
          TimerRecord r;
          r.id = *id;
          r.name = std::move(name);
          r.definition = EncodeTimerSpec(spec);
          r.created_ms = clock_.WallMillis();
          r.next_fire_ms = spec.active ? NextFire(*compiled, r.created_ms, r.created_ms) : 0;
          Put(std::move(r), compiled, std::move(done));
        });
      });
}

void TimerService::NewId(std::function<void(Result<uint64_t>)> done) {
  if (shared_ == nullptr) return done(next_id_++);
  shared_->TakeTimerId(std::move(done));
}

void TimerService::Replace(uint64_t id, std::string name, TimerSpec spec, InfoDone done) {
  auto compiled = Check(name, spec);
  if (!compiled.ok()) return done(compiled.status());
  using Rows = std::pair<Result<std::optional<TimerRecord>>, Result<std::optional<TimerRecord>>>;
  store::ReadAsync(
      store_,
      [&store = store_, id, name] {
        return Rows{store.GetTimer(id), store.GetTimerByName(name)};
      },
      [this, id, name, spec, compiled = *compiled, done = std::move(done)](Rows rows) mutable {
        auto& [row, taken] = rows;
        auto found = Found(std::move(row));
        if (!found.ok()) return done(found.status());
        if (!taken.ok()) return done(taken.status());
        if (taken->has_value() && (*taken)->id != id) return done(NameTaken());
        TimerRecord r = std::move(found).value();
        r.name = std::move(name);
        r.definition = EncodeTimerSpec(spec);
        r.next_fire_ms = spec.active ? NextFire(*compiled, clock_.WallMillis(), r.created_ms) : 0;
        Put(std::move(r), compiled, std::move(done));
      });
}

void TimerService::SetActive(uint64_t id, bool active, InfoDone done) {
  store::ReadAsync(
      store_, [&store = store_, id] { return store.GetTimer(id); },
      [this, active, done = std::move(done)](Result<std::optional<TimerRecord>> row) mutable {
        auto found = Found(std::move(row));
        if (!found.ok()) return done(found.status());
        TimerRecord r = std::move(found).value();
        auto spec = DecodeTimerSpec(r.definition);
        if (!spec.ok()) return done(spec.status());
        if (spec->active == active) return done(TimerInfo{r, *spec});
        spec->active = active;
        auto compiled = Compile(*spec);
        if (!compiled.ok()) return done(compiled.status());
        r.definition = EncodeTimerSpec(*spec);
        // Resumed, it picks up after its last fire: the ones missed while
        // paused then meet its misfire policy.
        const int64_t from = r.last_fire_ms > 0 ? r.last_fire_ms : clock_.WallMillis();
        r.next_fire_ms = active ? NextFire(**compiled, from, r.created_ms) : 0;
        Put(std::move(r), *compiled, std::move(done));
      });
}

void TimerService::Delete(uint64_t id, Done done) {
  store::ReadAsync(
      store_, [&store = store_, id] { return store.GetTimer(id); },
      [this, id, done = std::move(done)](Result<std::optional<TimerRecord>> row) mutable {
        if (auto found = Found(std::move(row)); !found.ok()) return done(found.status());
        Drop(id);
        store_.Submit(Mutation::TimerDelete(id), std::move(done));
      });
}

void TimerService::Get(uint64_t id, InfoDone done) {
  store::ReadAsync(
      store_, [&store = store_, id] { return store.GetTimer(id); },
      [done = std::move(done)](Result<std::optional<TimerRecord>> row) {
        auto found = Found(std::move(row));
        if (!found.ok()) return done(found.status());
        auto spec = DecodeTimerSpec(found->definition);
        if (!spec.ok()) return done(spec.status());
        done(TimerInfo{std::move(found).value(), *spec});
      });
}

void TimerService::List(uint64_t after_id, size_t limit, ListDone done) {
  store::ReadAsync(
      store_, [&store = store_, after_id, limit] { return store.ListTimers(after_id, limit); },
      [done = std::move(done)](Result<std::vector<TimerRecord>> rows) {
        if (!rows.ok()) return done(rows.status());
        std::vector<TimerInfo> out;
        for (TimerRecord& r : *rows) {
          auto spec = DecodeTimerSpec(r.definition);
          if (!spec.ok()) return done(spec.status());
          out.push_back({std::move(r), std::move(*spec)});
        }
        done(std::move(out));
      });
}

// ---------------------------------------------------------------- cluster mode

bool TimerService::Owns(uint64_t id, store::change::Fence* fence) const {
  if (shared_ == nullptr) return true;
  const int shard = shared_->TimerShardOf(id);
  const std::optional<store::change::Fence> held = owned_.FenceFor(shard);
  if (!held) return false;
  if (auto r = refused_.find(shard); r != refused_.end() && r->second == held->epoch) return false;
  if (fence != nullptr) *fence = *held;
  return true;
}

void TimerService::SetOwnership(const store::Ownership& owned) {
  if (shared_ == nullptr) return;
  // Timers of a shard lost, or retaken at a new epoch (another node may
  // have fired them meanwhile), are let go; the window is read again for
  // the shards gained and retaken.
  const store::Ownership::Change change = owned.Since(owned_);
  std::vector<uint64_t> gone;
  for (const auto& [id, t] : loaded_) {
    const int shard = shared_->TimerShardOf(id);
    const auto before = owned_.FenceFor(shard);
    const auto now = owned.FenceFor(shard);
    if (!before || !now || before->epoch != now->epoch) gone.push_back(id);
  }
  owned_ = owned;
  std::erase_if(refused_, [&](const auto& r) {
    const auto fence = owned_.FenceFor(r.first);
    return !fence || fence->epoch != r.second;
  });
  for (uint64_t id : gone) Drop(id);
  if (!change.gained.empty() || !change.retaken.empty()) {
    ++owned_generation_;
    loaded_until_ms_ = 0;  // the next tick loads the window again
  }
  ArmWake(true);
}

void TimerService::Hear(const std::vector<store::Notice>& notices) {
  if (shared_ == nullptr) return;
  std::vector<uint64_t> changed;
  for (const store::Notice& n : notices) {
    if (n.kind == store::Notice::Kind::kListening) {
      // Notices may have been missed: the whole window is read again.
      loaded_until_ms_ = 0;
      ArmWake(true);
    }
    if (n.kind == store::Notice::Kind::kTimer && Owns(n.id)) changed.push_back(n.id);
  }
  if (changed.empty()) return;
  // Changed through some node (this one included): its row says how now.
  for (uint64_t id : changed) Drop(id);
  Reload(std::move(changed));
}

void TimerService::Fires(uint64_t id, size_t limit, FiresDone done) {
  store::ReadAsync(
      store_, [&store = store_, id, limit] { return store.TimerFires(id, limit); },
      std::move(done));
}

}  // namespace delayd::timer
