// Reads: peeks, stats, jobs and topics, merging memory (newer) with the
// store for jobs memory does not hold (read aside, engine.h says how).
#include <algorithm>
#include <limits>

#include "engine/engine.h"
#include "engine/spec_codec.h"

namespace delayd::engine {

using store::JobRecord;
using store::StoredState;

void Engine::Peek(uint64_t id, Reply<JobView> done) {
  LiveOrFar<JobView>(
      id, [this](const Job& j) { return View(j); },
      [](JobRecord r) {
        return JobView{r.id, std::make_shared<const std::string>(std::move(r.body))};
      },
      std::move(done));
}

void Engine::PeekReady(Client* c, Reply<JobView> done) { home_->PeekReady(c, std::move(done)); }

void Engine::PeekBuried(Client* c, Reply<JobView> done) { home_->PeekBuried(c, std::move(done)); }

// The first job of the used tube's set; when that is in the store, once
// the refill has read it.
void Engine::PeekFirst(Client* c, store::JobSet s, Reply<JobView> done) {
  Tube* t = c->use;
  if (Job* j = FirstOf(t, s)) return done(View(*j));
  if (t->windows[static_cast<int>(s)].cold == 0) {
    return done(Status::NotFound(s == store::JobSet::kBuried ? "no buried job" : "no ready job"));
  }
  Pin(c);
  WhenRefilled(t, s, [this, c, s, done = std::move(done)](const Status& read) mutable {
    if (!Unpin(c)) return done(Status::Unavailable("the client hung up"));
    if (!read.ok()) return done(read);
    PeekFirst(c, s, std::move(done));
  });
}

void Engine::PeekDelayed(Client* c, Reply<JobView> done) { PeekFar(c->use->name, std::move(done)); }

// The soonest delayed job of the tube: in memory if it has any (they are
// due before every job beyond the horizon), else the store's soonest.
void Engine::PeekFar(const std::string& tube, Reply<JobView> done) {
  home_->PeekDelayed(tube, std::move(done));
}

void Engine::PeekDelayedHere(const std::string& tube, Reply<JobView> done) {
  Tube* t = FindTube(tube);
  if (t != nullptr && !t->delayed.empty()) return done(View(**t->delayed.begin()));
  if (t == nullptr || t->far_delayed == 0) return done(Status::NotFound("no delayed job"));
  Aside([&store = store_, tube,
         after = loaded_minute_ - 1] { return store.FarDelayed(tube, after, 64); },
        [this, tube, done = std::move(done)](Result<std::vector<JobRecord>> rows,
                                             uint64_t since) mutable {
          if (!rows.ok()) return done(rows.status());
          Tube* now = FindTube(tube);
          if (now != nullptr && !now->delayed.empty()) return done(View(**now->delayed.begin()));
          for (JobRecord& rec : rows.value()) {
            // Changed in memory since the read: the rows may be out of date.
            if (LeftSince(rec.id, since)) return PeekDelayedHere(tube, std::move(done));
            if (jobs_.count(rec.id) || !IsFar(rec)) continue;
            return done(JobView{rec.id, std::make_shared<const std::string>(std::move(rec.body))});
          }
          done(Status::NotFound("no delayed job"));
        });
}

void Engine::StatsJob(uint64_t id, Reply<JobStats> done) {
  auto live = [this](const Job& j) {
    const int64_t now_us = clock_.SteadyMicros();
    const int64_t wall_us = clock_.WallMicros();
    JobStats s;
    s.id = j.id;
    s.tube = j.tube->name;
    s.state = j.state;
    s.priority = j.priority;
    s.age_s = (wall_us / 1000 - j.created_ms) / 1000;
    s.delay_s = j.delay_ms / 1000;
    s.ttr_s = j.ttr_ms / 1000;
    if (j.state == JobState::kReserved) s.time_left_s = (j.deadline_us - now_us) / 1'000'000;
    if (j.state == JobState::kDelayed) s.time_left_s = (j.due_us - wall_us) / 1'000'000;
    s.counters = j.counters;
    return s;
  };
  auto far = [this](JobRecord r) {
    const int64_t wall_us = clock_.WallMicros();
    JobStats s;
    s.id = r.id;
    s.tube = r.tube;
    s.state = FromStored(r.state);  // delayed, but for rows in cluster mode
    s.priority = r.priority;
    s.age_s = (wall_us / 1000 - r.created_ms) / 1000;
    s.delay_s = r.delay_ms / 1000;
    s.ttr_s = r.ttr_ms / 1000;
    if (s.state == JobState::kDelayed) s.time_left_s = (r.due_ms * 1000 - wall_us) / 1'000'000;
    if (s.state == JobState::kReserved)
      s.time_left_s = (r.deadline_ms * 1000 - wall_us) / 1'000'000;
    s.counters = r.counters;
    return s;
  };
  LiveOrFar<JobStats>(id, live, far, std::move(done));
}

Result<TubeStats> Engine::StatsTube(const std::string& name) const {
  Tube* t = FindTube(name);
  if (t == nullptr) return Status::NotFound("no such tube");
  TubeStats s;
  s.name = t->name;
  s.urgent = t->urgent_count();
  s.ready = t->ready_count();
  s.reserved = t->reserved;
  s.delayed = t->delayed_count();
  s.buried = t->buried_count();
  s.total_jobs = t->total_jobs;
  s.using_count = t->using_count;
  s.watching_count = t->watching_count;
  s.waiting = t->waiters.size();
  s.deletes = t->deletes;
  s.pauses = t->pauses;
  if (Paused(t)) {  // a pause whose end has passed reads as none
    s.pause_s = t->pause_ms / 1000;
    s.pause_left_s = (t->unpause_us - clock_.SteadyMicros()) / 1'000'000;
  }
  return s;
}

void Engine::StatsTube(const std::string& name, Reply<TubeStats> done) {
  home_->StatsTube(name, std::move(done));
}

void Engine::Stats(Reply<EngineStats> done) { home_->Stats(std::move(done)); }

void Engine::TubeNames(Reply<std::vector<std::string>> done) { home_->TubeNames(std::move(done)); }

EngineStats Engine::Stats() const {
  EngineStats s;
  for (auto& t : tubes_) {
    s.urgent += t->urgent_count();
    s.ready += t->ready_count();
    s.reserved += t->reserved;
    s.delayed += t->delayed_count();
    s.buried += t->buried_count();
  }
  s.total_jobs = total_jobs_;
  s.job_timeouts = job_timeouts_;
  s.tubes = tubes_.size();
  s.waiting = waiting_;
  s.draining = draining_;
  s.unsound_rows = unsound_rows_;
  return s;
}

JobInfo Engine::Info(const Job& j) const {
  JobInfo info;
  info.record = Record(j);
  info.record.body = *j.body;
  if (j.extra) info.spec = j.extra->spec;
  info.state = j.state;
  if (j.state == JobState::kReserved) {
    info.lease = j.counters.reserves;
    info.lease_until_ms = clock_.WallMillis() + (j.deadline_us - clock_.SteadyMicros()) / 1000;
    info.pushing = j.reserver == push_holder_;
  }
  return info;
}

JobInfo Engine::Info(JobRecord r) {
  JobInfo info;
  info.state = FromStored(r.state);
  info.spec = DecodeSpec(r.spec);
  info.record = std::move(r);
  return info;
}

void Engine::GetJob(uint64_t id, Reply<JobInfo> done) {
  GetJobs({id}, [done = std::move(done)](std::vector<Result<JobInfo>> jobs) {
    done(std::move(jobs.front()));
  });
}

void Engine::GetJobs(std::vector<uint64_t> ids,
                     std::function<void(std::vector<Result<JobInfo>>)> done) {
  // From memory, for the jobs it holds: a submitted job not yet durable is
  // not there yet; a job being deleted is read from the store until it is.
  auto from_memory = [this](uint64_t id) -> std::optional<Result<JobInfo>> {
    if (Job* j = FindLive(id)) return Info(*j);
    auto it = jobs_.find(id);
    if (it != jobs_.end() && it->second->state == JobState::kPending) {
      return Status::NotFound("no such job");
    }
    return std::nullopt;
  };
  std::vector<uint64_t> missing;
  for (uint64_t id : ids) {
    if (!from_memory(id)) missing.push_back(id);
  }
  auto answer = [ids, from_memory,
                 done](const std::unordered_map<uint64_t, Result<std::optional<JobRecord>>>& read) {
    std::vector<Result<JobInfo>> out;
    out.reserve(ids.size());
    for (uint64_t id : ids) {
      if (auto mem = from_memory(id)) {
        out.push_back(std::move(*mem));
        continue;
      }
      const auto& r = read.at(id);
      if (!r.ok()) {
        out.emplace_back(r.status());
      } else if (!r.value()) {
        out.emplace_back(Status::NotFound("no such job"));
      } else {
        out.emplace_back(Info(*r.value()));
      }
    }
    done(std::move(out));
  };
  if (missing.empty()) return answer({});
  Aside(
      [&store = store_, missing] {
        std::vector<Result<std::optional<JobRecord>>> rows;
        for (uint64_t id : missing) rows.push_back(store.Get(id));
        return rows;
      },
      [this, ids = std::move(ids), missing, from_memory, answer, done](
          std::vector<Result<std::optional<JobRecord>>> rows, uint64_t since) mutable {
        std::unordered_map<uint64_t, Result<std::optional<JobRecord>>> read;
        for (size_t i = 0; i < missing.size(); ++i) {
          // Changed in memory since the read, and gone from it again: the
          // row may be out of date.
          if (LeftSince(missing[i], since) && !from_memory(missing[i])) {
            return GetJobs(std::move(ids), std::move(done));
          }
          read.emplace(missing[i], std::move(rows[i]));
        }
        answer(read);
      });
}

void Engine::GetByKey(const std::string& topic, const std::string& key, Reply<JobInfo> done) {
  if (pending_keys_.count(KeyOf(topic, key))) return done(Status::NotFound("no job with this key"));
  Aside([&store = store_, topic, key] { return store.GetByKey(topic, key); },
        [this, done = std::move(done)](Result<std::optional<JobRecord>> r, uint64_t) mutable {
          if (!r.ok()) return done(r.status());
          const auto& rec = r.value();
          if (!rec || (rec->state == StoredState::kDone &&
                       rec->done_ms + options_.done_retention_ms <= clock_.WallMillis())) {
            return done(Status::NotFound("no job with this key"));
          }
          GetJob(rec->id, std::move(done));  // as memory or the store has it now
        });
}

namespace {

// What a list's store read gives: the rows that match, and how far it read.
struct ListScan {
  std::vector<JobRecord> rows;
  uint64_t last_id = 0;    // the last job read (matched or not)
  bool exhausted = false;  // nothing after last_id matches the store's filter
};

// Reads the rows of `f` after f.after_id until f.limit + 1 match, or (with a
// body test) until kBodyScanBytes have been read.
Result<ListScan> ScanList(store::Store& store, store::ListQuery q, const ListFilter& f) {
  ListScan scan;
  scan.last_id = q.after_id;
  size_t read = 0;  // bytes, as kBodyScanBytes counts them
  while (true) {
    q.after_id = scan.last_id;
    q.limit = f.body ? 1000 : f.limit + 1;
    auto rows = store.List(q);
    if (!rows.ok()) return rows.status();
    for (JobRecord& r : rows.value()) {
      scan.last_id = r.id;
      read += kBodyScanRowBytes + r.body.size();
      if (!f.body || f.body->Matches(r.body)) scan.rows.push_back(std::move(r));
      if (scan.rows.size() > f.limit || (f.body && read >= kBodyScanBytes)) {
        scan.exhausted = &r == &rows->back() && rows->size() < q.limit;
        return scan;
      }
    }
    if (rows->size() < q.limit) {
      scan.exhausted = true;
      return scan;
    }
    if (!f.body) return scan;
  }
}

}  // namespace

void Engine::List(const ListFilter& f, Reply<ListPage> done) {
  auto matches = [f](const JobInfo& info) {
    const JobRecord& r = info.record;
    if (f.topic && r.tube != *f.topic) return false;
    if (f.state && *f.state != info.state) return false;
    if (!f.key_prefix.empty() && r.key.compare(0, f.key_prefix.size(), f.key_prefix) != 0) {
      return false;
    }
    if (f.due_after_ms && r.due_ms < *f.due_after_ms) return false;
    if (f.due_before_ms && r.due_ms >= *f.due_before_ms) return false;
    if (f.body && !f.body->Matches(r.body)) return false;
    return r.last_error.find(f.error_contains) != std::string::npos;
  };
  if (f.state == JobState::kReserved && home_->ReservationsInMemory()) {
    // Reservations live only in memory (in cluster mode they are rows).
    ListPage page;
    std::vector<Job*> held;
    for (auto& [id, j] : jobs_) {
      if (id > f.after_id && j->state == JobState::kReserved) held.push_back(j.get());
    }
    std::sort(held.begin(), held.end(), [](Job* a, Job* b) { return a->id < b->id; });
    for (Job* j : held) {
      JobInfo info = Info(*j);
      if (!matches(info)) continue;
      if (page.jobs.size() == f.limit) {
        page.next_cursor = page.jobs.back().record.id;
        break;
      }
      page.jobs.push_back(std::move(info));
    }
    return done(std::move(page));
  }
  store::ListQuery q;
  q.tube = f.topic;
  if (f.state) {
    q.state = f.state == JobState::kReserved ? store::StoredState::kReserved : ToStored(*f.state);
  }
  q.key_prefix = f.key_prefix;
  q.due_after_ms = f.due_after_ms;
  q.due_before_ms = f.due_before_ms;
  q.error_contains = f.error_contains;
  q.after_id = f.after_id;
  Aside([&store = store_, q, f] { return ScanList(store, q, f); },
        [this, f, matches, done = std::move(done)](Result<ListScan> scan, uint64_t since) mutable {
          if (!scan.ok()) return done(scan.status());
          ListPage page;
          // Memory is newer than the store for the jobs it holds; a row of a
          // job that left memory since the read may be out of date.
          for (JobRecord& r : scan->rows) {
            if (LeftSince(r.id, since)) return List(f, std::move(done));
          }
          for (JobRecord& r : scan->rows) {
            if (page.jobs.size() == f.limit) {
              page.next_cursor = page.jobs.empty() ? r.id - 1 : page.jobs.back().record.id;
              break;
            }
            auto it = jobs_.find(r.id);
            JobInfo info;
            if (it == jobs_.end()) {
              info = Info(std::move(r));
            } else if (!Visible(it->second->state)) {
              continue;
            } else {
              info = Info(*it->second);
            }
            if (matches(info)) page.jobs.push_back(std::move(info));
          }
          // Every row read went through the page: go on after the last.
          if (page.next_cursor == 0 && !scan->exhausted) page.next_cursor = scan->last_id;
          done(std::move(page));
        });
}

void Engine::DueForecast(int64_t bucket_minutes, size_t buckets, std::optional<std::string> topic,
                         Reply<Forecast> done) {
  const int64_t now_ms = clock_.WallMillis();
  const bool hours = bucket_minutes % 60 == 0;
  const int64_t from_minute = hours ? store::DueHour(now_ms) * 60 : store::DueMinute(now_ms);
  Forecast f;
  f.from_ms = from_minute * store::kMillisPerMinute;
  if (ForecastInMemory(bucket_minutes)) {
    f.counts.assign(buckets, 0);
    const int64_t first = from_minute / 60, width = bucket_minutes / 60;
    const int64_t end = first + width * static_cast<int64_t>(buckets);
    for (const auto& t : tubes_) {
      if (topic && t->name != *topic) continue;
      const DueHours& counts = t->due_hours;
      for (auto it = counts.lower_bound(first); it != counts.end() && it->first < end; ++it) {
        f.counts[static_cast<size_t>((it->first - first) / width)] += it->second;
      }
    }
    return done(std::move(f));
  }
  // A job due within the current millisecond is due now (memory may have
  // made it ready already), so the store counts from the next one on.
  Aside(
      [&store = store_, now_ms, from_minute, bucket_minutes, buckets, topic = std::move(topic)] {
        return store.DueCounts(now_ms + 1, from_minute, bucket_minutes, buckets, topic);
      },
      [f, done = std::move(done)](Result<std::vector<uint64_t>> r, uint64_t) mutable {
        if (!r.ok()) return done(r.status());
        f.counts = std::move(r).value();
        done(std::move(f));
      });
}

void Engine::DeadLetterGroups(std::optional<std::string> topic, size_t limit,
                              Reply<std::vector<store::ErrorGroup>> done) {
  Aside([&store = store_, topic = std::move(topic),
         limit] { return store.BuriedByError(topic, limit); },
        [done = std::move(done)](Result<std::vector<store::ErrorGroup>> r, uint64_t) {
          done(std::move(r));
        });
}

std::vector<TopicInfo> Engine::Topics() const {
  std::vector<TopicInfo> out;
  for (auto& t : tubes_) out.push_back(Topic(t->name).value());
  std::sort(out.begin(), out.end(),
            [](const TopicInfo& a, const TopicInfo& b) { return a.name < b.name; });
  return out;
}

Result<TopicInfo> Engine::Topic(const std::string& name) const {
  Tube* t = FindTube(name);
  if (t == nullptr) return Status::NotFound("no such topic");
  TopicInfo info;
  info.name = t->name;
  info.ready = t->ready_count();
  info.delayed = t->delayed_count();
  info.reserved = t->reserved;
  info.buried = t->buried_count();
  info.total_jobs = t->total_jobs;
  info.paused = Paused(t);
  if (info.paused) info.pause_left_ms = (t->unpause_us - clock_.SteadyMicros()) / 1000;
  // Of the ready jobs in memory: beyond a window, the oldest in the store
  // may be older (due times are not the sets' order).
  int64_t oldest = 0;
  for (const auto* set : {&t->ready, &t->push_ready}) {
    for (const Job* j : *set) {
      if (oldest == 0 || j->due_ms() < oldest) oldest = j->due_ms();
    }
  }
  info.oldest_ready_due_ms = oldest;
  info.settings = t->settings;
  return info;
}

void Engine::Topics(Reply<std::vector<TopicInfo>> done) {
  home_->Topics(std::nullopt, std::move(done));
}

void Engine::Topic(const std::string& name, Reply<TopicInfo> done) {
  home_->Topics(name, [done = std::move(done)](Result<std::vector<TopicInfo>> r) {
    if (!r.ok()) return done(r.status());
    if (r->empty()) return done(Status::NotFound("no such topic"));
    done(std::move(r->front()));
  });
}

std::vector<std::string> Engine::PushReadyTopics() const {
  std::vector<std::string> out;
  for (auto& t : tubes_) {
    if (!Paused(t.get()) && (!t->push_ready.empty() || t->windows[1].cold > 0)) {
      out.push_back(t->name);
    }
  }
  return out;
}

}  // namespace delayd::engine
