// The engine's HTTP-facing half: submission with business keys, reads and
// lists that merge memory with the store, modifications, pull leases held
// over HTTP, and topics.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "engine/engine.h"
#include "engine/spec_json.h"

namespace delayd::engine {

using store::JobRecord;
using store::Mutation;
using store::StoredState;

namespace {

std::string KeyOf(const std::string& tube, const std::string& key) { return tube + '\0' + key; }

}  // namespace

void Engine::ApplyDefaults(const Tube* t, JobSpec& spec, int64_t& ttr_ms) const {
  const TopicSettings* s = t != nullptr ? t->settings.get() : nullptr;
  if (s != nullptr) {
    if (!spec.target && s->target) spec.target = s->target;
    if (!spec.retry && s->retry) spec.retry = s->retry;
    if (ttr_ms == 0) ttr_ms = s->ttr_ms;
  }
  if (ttr_ms == 0) ttr_ms = options_.default_ttr_ms;
}

// ---------------------------------------------------------------- submit

void Engine::Submit(const std::string& topic, std::vector<NewJob> jobs,
                    std::function<void(Result<std::vector<Submitted>>)> done, AlsoFn also) {
  if (draining_) return done(Status::Unavailable("draining"));
  const Tube* tube = FindTube(topic);
  const int64_t now_ms = (clock_.WallMicros() + 999) / 1000;
  std::vector<Submitted> out(jobs.size());
  std::vector<Mutation> writes;
  std::vector<Job*> created;
  std::unordered_map<std::string, uint64_t> batch_keys;
  // Jobs of a batch mostly share one spec (the topic's defaults): share it.
  std::shared_ptr<const JobSpec> spec;
  std::string spec_text;
  for (size_t i = 0; i < jobs.size(); ++i) {
    NewJob& n = jobs[i];
    if (!n.key.empty()) {
      const std::string k = KeyOf(topic, n.key);
      auto in_batch = batch_keys.find(k);
      auto pending = pending_keys_.find(k);
      if (in_batch != batch_keys.end() || pending != pending_keys_.end()) {
        out[i] = {in_batch != batch_keys.end() ? in_batch->second : pending->second, true};
        continue;
      }
      auto existing = store_.GetByKey(topic, n.key);
      if (!existing.ok()) return done(existing.status());
      if (const auto& rec = existing.value()) {
        // A job cancelled a moment ago may still be in the store; its delete
        // is queued ahead of this insert, so the key is free already.
        auto old = jobs_.find(rec->id);
        const bool cancelled = old != jobs_.end() && old->second->state == JobState::kDeleting &&
                               old->second->extra && old->second->extra->cancelled;
        if (!cancelled) {
          if (rec->state != StoredState::kDone ||
              rec->done_ms + options_.done_retention_ms > now_ms) {
            out[i] = {rec->id, true};
            continue;
          }
          writes.push_back(Mutation::Delete(rec->id));  // an expired done record frees its key
        }
      }
    }
    int64_t ttr_ms = n.ttr_ms;
    ApplyDefaults(tube, n.spec, ttr_ms);
    JobRecord r;
    r.id = next_id_++;
    r.tube = topic;
    r.priority = n.priority;
    r.run_at_ms = n.run_at_ms ? *n.run_at_ms : now_ms + n.delay_ms;
    r.due_ms = std::max(r.run_at_ms, now_ms);
    r.delay_ms = r.due_ms - now_ms;
    r.state = r.delay_ms > 0 ? StoredState::kDelayed : StoredState::kReady;
    r.ttr_ms = ttr_ms;
    r.created_ms = now_ms;
    r.key = std::move(n.key);
    r.spec = EncodeSpec(n.spec);
    if (!spec || r.spec != spec_text) {
      spec = std::make_shared<const JobSpec>(std::move(n.spec));
      spec_text = r.spec;
    }
    r.body = std::move(n.body);
    if (!r.key.empty()) {
      batch_keys.emplace(KeyOf(topic, r.key), r.id);
      pending_keys_.emplace(KeyOf(topic, r.key), r.id);
    }
    out[i] = {r.id, false};
    Job* j = AddJob(r, JobState::kPending, spec);
    ++j->pending_writes;
    created.push_back(j);
    writes.push_back(Mutation::Insert(std::move(r)));
  }
  if (also) {
    for (store::Mutation& m : also(out)) writes.push_back(std::move(m));
  }
  if (writes.empty()) return done(std::move(out));
  store_.SubmitAll(std::move(writes), [this, created, topic, out = std::move(out),
                                       done = std::move(done)](const Status& s) mutable {
    for (Job* j : created) {
      if (j->extra && !j->extra->key.empty()) pending_keys_.erase(KeyOf(topic, j->extra->key));
      Publish(j, s);
    }
    // Answer while the jobs are still pinned in memory, so reading them back
    // for the reply needs no store reads; then far ones go to the store.
    if (!s.ok()) {
      done(s);
    } else {
      done(std::move(out));
    }
    for (Job* j : created) WriteDone(j);
  });
}

// ---------------------------------------------------------------- reads

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

Result<JobInfo> Engine::GetJob(uint64_t id) {
  if (Job* j = FindLive(id)) return Info(*j);
  auto it = jobs_.find(id);
  if (it != jobs_.end() && it->second->state == JobState::kPending) {
    return Status::NotFound("no such job");
  }
  auto r = store_.Get(id);
  if (!r.ok()) return r.status();
  if (!r.value()) return Status::NotFound("no such job");
  return Info(std::move(*r.value()));
}

Result<JobInfo> Engine::GetByKey(const std::string& topic, const std::string& key) {
  auto pending = pending_keys_.find(KeyOf(topic, key));
  if (pending != pending_keys_.end()) return Status::NotFound("no job with this key");
  auto r = store_.GetByKey(topic, key);
  if (!r.ok()) return r.status();
  const auto& rec = r.value();
  if (!rec || (rec->state == StoredState::kDone &&
               rec->done_ms + options_.done_retention_ms <= clock_.WallMillis())) {
    return Status::NotFound("no job with this key");
  }
  return GetJob(rec->id);
}

Result<ListPage> Engine::List(const ListFilter& f) {
  auto matches = [&f](const JobInfo& info) {
    const JobRecord& r = info.record;
    if (f.topic && r.tube != *f.topic) return false;
    if (f.state && *f.state != info.state) return false;
    if (!f.key_prefix.empty() && r.key.compare(0, f.key_prefix.size(), f.key_prefix) != 0) {
      return false;
    }
    if (f.due_after_ms && r.due_ms < *f.due_after_ms) return false;
    if (f.due_before_ms && r.due_ms >= *f.due_before_ms) return false;
    return true;
  };
  ListPage page;
  if (f.state == JobState::kReserved) {
    // Reservations live only in memory.
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
    return page;
  }
  store::ListQuery q;
  q.tube = f.topic;
  if (f.state) q.state = ToStored(*f.state);
  q.key_prefix = f.key_prefix;
  q.due_after_ms = f.due_after_ms;
  q.due_before_ms = f.due_before_ms;
  q.after_id = f.after_id;
  q.limit = f.limit + 1;
  auto rows = store_.List(q);
  if (!rows.ok()) return rows.status();
  // Memory is newer than the store for the jobs it holds.
  for (JobRecord& r : rows.value()) {
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
  if (page.next_cursor == 0 && rows->size() > f.limit) page.next_cursor = rows->back().id - 1;
  return page;
}

// ---------------------------------------------------------------- changes

void Engine::Modify(uint64_t id, const JobPatch& p, Done done) {
  auto found = FindOrLoad(id, [](const Job& j) { return j.state != JobState::kReserved; });
  if (!found.ok()) return done(found.status());
  Job* j = found.value();
  Detach(j);
  const bool was_buried = j->state == JobState::kBuried;
  if (p.priority) j->priority = *p.priority;
  if (p.ttr_ms) j->ttr_ms = *p.ttr_ms;
  if (p.body) j->body = std::make_shared<const std::string>(*p.body);
  if (p.due_ms) {
    j->due_ms = *p.due_ms;
    j->run_at_ms = *p.due_ms;
    j->delay_ms = std::max<int64_t>(0, *p.due_ms - clock_.WallMillis());
  }
  if (p.target || p.retry || p.encoding) {
    JobSpec spec = j->extra && j->extra->spec ? *j->extra->spec : JobSpec{};
    if (p.target) spec.target = *p.target;
    if (p.retry) spec.retry = *p.retry;
    if (p.encoding) spec.encoding = *p.encoding;
    if (!j->extra) j->extra = std::make_unique<JobExtra>();
    j->extra->spec = std::make_shared<const JobSpec>(spec);
    j->extra->spec_text = EncodeSpec(spec);
  }
  if (was_buried) {
    j->state = JobState::kBuried;  // keeps its place in kick order
    j->tube->buried.insert(j);
  } else if (j->due_ms * 1000 > clock_.WallMicros()) {
    MakeDelayed(j);
  } else {
    MakeReady(j);
  }
  JobRecord r = Record(*j);
  r.body = *j->body;
  Write(j, Mutation::Replace(std::move(r)), std::move(done));
}

void Engine::Remove(uint64_t id, Done done) {
  auto found = FindOrLoad(id, [](const Job& j) { return j.state != JobState::kReserved; });
  if (found.ok()) return Cancel(found.value(), std::move(done));
  if (found.status().code() != StatusCode::kNotFound || jobs_.count(id)) {
    return done(found.status());
  }
  // A done job, kept as history: removing it frees its key now rather than
  // at the end of its retention.
  auto r = store_.Get(id);
  if (!r.ok()) return done(r.status());
  if (!r.value() || r.value()->state != StoredState::kDone) {
    return done(Status::NotFound("no such job"));
  }
  store_.Submit(Mutation::Delete(id), std::move(done));
}

void Engine::RunNow(uint64_t id, Done done) {
  auto found = FindOrLoad(id, [](const Job& j) {
    return j.state == JobState::kDelayed || j.state == JobState::kReady;
  });
  if (!found.ok()) return done(found.status());
  Job* j = found.value();
  if (j->state == JobState::kReady) return done(Status::Ok());
  Detach(j);
  j->due_ms = clock_.WallMillis();
  MakeReady(j);
  Write(j, Mutation::Update(Record(*j)), std::move(done));
}

void Engine::Retry(uint64_t id, Done done) {
  Job* j = FindLive(id);
  if (j == nullptr) return done(Status::NotFound("no such job"));
  if (j->state != JobState::kBuried) {
    return done(Status::Conflict(std::string("job is not a dead letter (buried)")));
  }
  KickOne(j, /*fresh_budget=*/true, std::move(done));
}

// ---------------------------------------------------------------- HTTP pull

Result<JobInfo> Engine::AdoptReservation(Client* c, uint64_t id) {
  Job* j = ReservedBy(c, id);
  if (j == nullptr) return Status::NotFound("reservation lost");
  c->reserved.erase(j);
  j->reserver = http_holder_;
  http_holder_->reserved.insert(j);
  return Info(*j);
}

void Engine::SettleHttp(uint64_t id, uint32_t lease, Settle how, uint32_t priority,
                        int64_t delay_ms, Done done) {
  Job* j = FindLive(id);
  if (j == nullptr) return done(Status::NotFound("no such job"));
  if (j->state != JobState::kReserved || j->reserver != http_holder_ ||
      (lease != 0 && lease != j->counters.reserves)) {
    return done(Status::Conflict("the job is not reserved under this lease"));
  }
  switch (how) {
    case Settle::kFinish:
      return Finish(j, std::move(done));
    case Settle::kRelease:
      return Requeue(j, priority, delay_ms, std::move(done));
    case Settle::kBury:
      return BuryHeld(j, priority, std::move(done));
    case Settle::kTouch:
      return done(Touch(http_holder_, id));
  }
}

// ---------------------------------------------------------------- topics

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
  info.ready = t->ready.size() + t->push_ready.size();
  info.delayed = t->delayed.size() + t->far_delayed;
  info.reserved = t->reserved;
  info.buried = t->buried.size();
  info.total_jobs = t->total_jobs;
  info.paused = Paused(t);
  if (info.paused) info.pause_left_ms = (t->unpause_us - clock_.SteadyMicros()) / 1000;
  int64_t oldest = 0;
  for (const auto* set : {&t->ready, &t->push_ready}) {
    for (const Job* j : *set) {
      if (oldest == 0 || j->due_ms < oldest) oldest = j->due_ms;
    }
  }
  info.oldest_ready_due_ms = oldest;
  info.settings = t->settings;
  return info;
}

void Engine::SetTopicSettings(const std::string& name,
                              std::shared_ptr<const TopicSettings> settings, Done done) {
  store_.Submit(Mutation::TopicSettings(name, settings ? EncodeSettings(*settings) : ""),
                [this, name, settings, done = std::move(done)](const Status& s) {
                  if (s.ok()) {
                    Tube* t = FindOrMakeTube(name);
                    t->settings = settings;
                    MaybeDropTube(t);
                  }
                  done(s);
                });
}

void Engine::ResumeTube(const std::string& name, Done done) {
  if (FindTube(name) == nullptr) return done(Status::NotFound("no such topic"));
  store_.Submit(Mutation::PauseTube(name, 0, 0),
                [this, name, done = std::move(done)](const Status& s) {
                  Tube* t = FindTube(name);
                  if (s.ok() && t != nullptr && Paused(t)) {
                    t->pause_ms = 0;
                    t->unpause_us = 0;
                    wheel_.Cancel(&t->timer.node);
                    Serve(t);
                    NotifyPush(t);
                  }
                  done(s);
                });
}

void Engine::PurgeDone() {
  // Lost to a power cut, a purge only leaves records for the next one.
  store_.Submit(Mutation::PurgeDone(clock_.WallMillis() - options_.done_retention_ms).Written(),
                [](const Status& s) {
                  if (!s.ok()) spdlog::warn("purging done jobs: {}", s.ToString());
                });
}

}  // namespace delayd::engine
