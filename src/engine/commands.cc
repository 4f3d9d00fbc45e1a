// Changes clients ask for, over beanstalk, HTTP or the dispatcher: each
// checks what it may act on and calls the transitions.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <limits>

#include "engine/engine.h"
#include "engine/spec_codec.h"

namespace delayd::engine {

using store::JobRecord;
using store::Mutation;
using store::StoredState;

void Engine::Put(Client* c, uint32_t priority, int64_t delay_ms, int64_t ttr_ms, std::string body,
                 std::function<void(Result<uint64_t>)> done) {
  if (draining_) {
    done(Status::Unavailable("draining"));
    return;
  }
  if (!home_->IdsAtHand(1)) {
    // Cluster mode: the next block of ids is on its way; puts wait in order.
    Pin(c);
    home_->WaitIds(1, [this, c, priority, delay_ms, ttr_ms, body = std::move(body),
                       done = std::move(done)](const Status& s) mutable {
      if (!Unpin(c)) return done(Status::Unavailable("the client hung up"));
      if (!s.ok()) return done(s);
      Put(c, priority, delay_ms, ttr_ms, std::move(body), std::move(done));
    });
    return;
  }
  const int64_t due_us = DueFromNow(delay_ms);
  JobRecord r;
  r.id = home_->NextId();
  r.tube = c->use->name;
  r.priority = priority;
  r.state = delay_ms > 0 ? StoredState::kDelayed : StoredState::kReady;
  r.due_ms = CeilMs(due_us);
  r.delay_ms = delay_ms;
  r.ttr_ms = ttr_ms;
  r.created_ms = r.due_ms - delay_ms;
  r.run_at_ms = r.due_ms;
  r.body = std::move(body);
  if (c->use->settings) {
    JobSpec spec;
    int64_t unused_ttr = ttr_ms;
    ApplyDefaults(c->use, spec, unused_ttr);
    r.spec = EncodeSpec(spec);
    r.push = spec.target.has_value();
  }
  Job* j = AddJob(r, JobState::kPending);
  j->due_us = due_us;
  Write(j, Mutation::Insert(std::move(r)), [this, j, done = std::move(done)](const Status& s) {
    Publish(j, s);
    // A put has no key, so a conflict is the store refusing a new job's id
    // (a row that should not exist): a store failure, never beanstalk's
    // NOT_FOUND.
    if (s.code() == StatusCode::kConflict) {
      return done(Status::Internal("the store refused a new job: " + s.message()));
    }
    if (!s.ok()) return done(s);
    done(j->id);
  });
}

void Engine::Submit(const std::string& topic, std::vector<NewJob> jobs,
                    std::function<void(Result<std::vector<Submitted>>)> done, AlsoFn also) {
  if (draining_) return done(Status::Unavailable("draining"));
  const bool keyed =
      std::any_of(jobs.begin(), jobs.end(), [](const NewJob& n) { return !n.key.empty(); });
  if (!keyed) return SubmitNow(topic, std::move(jobs), {}, std::move(done), std::move(also));
  keyed_.push_back({topic, std::move(jobs), std::move(done), std::move(also)});
  if (keyed_.size() == 1) LookUpKeys();
}

// The keys of the front keyed submission are read aside, all in one read.
// Keys that settle meanwhile (their job's insert answered) stay pending
// until that read's answer is used: its rows may predate the commit, and
// pending_keys_ tells SubmitNow of the job. The next read sees the commit.
void Engine::LookUpKeys() {
  const KeyedSubmit& k = keyed_.front();
  std::vector<std::string> keys;
  for (const NewJob& n : k.jobs) {
    if (!n.key.empty()) keys.push_back(n.key);
  }
  Aside(
      [&store = store_, topic = k.topic, keys] {
        KeyRows rows;
        for (const std::string& key : keys) rows.push_back(store.GetByKey(topic, key));
        return rows;
      },
      [this, keys](KeyRows rows, uint64_t since) {
        // The keys settled before this answer (none settles while it is
        // used: commits are answered on later turns of the loop).
        auto release_settled = [this] {
          std::vector<std::pair<std::string, uint64_t>> settled;
          settled.swap(settled_keys_);
          for (const auto& [key, id] : settled) {
            auto it = pending_keys_.find(key);
            if (it != pending_keys_.end() && it->second == id) {
              pending_keys_.erase(it);
              FreeKey(key, false);  // the lookup below starts them
            }
          }
        };
        std::unordered_map<std::string, std::optional<JobRecord>> by_key;
        Status failed;
        bool again = false;
        for (size_t i = 0; i < rows.size(); ++i) {
          if (!rows[i].ok()) {
            failed = rows[i].status();
            break;
          }
          // A job that left memory since may have let its key go.
          if (rows[i].value() && LeftSince(rows[i].value()->id, since)) again = true;
          by_key[keys[i]] = std::move(rows[i]).value();
        }
        if (again && failed.ok()) {
          release_settled();  // the new read starts after their commits
          return LookUpKeys();
        }
        KeyedSubmit next = std::move(keyed_.front());
        keyed_.pop_front();
        if (!failed.ok()) {
          next.done(failed);
        } else {
          SubmitNow(next.topic, std::move(next.jobs), by_key, std::move(next.done),
                    std::move(next.also));
        }
        release_settled();
        if (!keyed_.empty()) LookUpKeys();
      });
}

// A key whose job's insert was answered: free for the store to tell, unless
// a key lookup is in flight (LookUpKeys).
void Engine::SettleKey(const std::string& key, uint64_t id) {
  if (keyed_.empty()) {
    pending_keys_.erase(key);
    FreeKey(key, true);
  } else {
    settled_keys_.emplace_back(key, id);
  }
}

void Engine::FreeKey(const std::string& key, bool start) {
  auto it = key_waiters_.find(key);
  if (it == key_waiters_.end()) return;
  std::vector<KeyedSubmit> waiting = std::move(it->second);
  key_waiters_.erase(it);
  const bool idle = keyed_.empty();
  for (KeyedSubmit& k : waiting) keyed_.push_back(std::move(k));
  if (start && idle) LookUpKeys();
}

void Engine::SubmitNow(const std::string& topic, std::vector<NewJob> jobs,
                       const std::unordered_map<std::string, std::optional<JobRecord>>& keys,
                       std::function<void(Result<std::vector<Submitted>>)> done, AlsoFn also) {
  if (draining_) return done(Status::Unavailable("draining"));
  // A key whose job is still being committed: this submission waits for
  // that commit's answer and looks its keys up again (FreeKey). Answered
  // now, a duplicate would name a job nobody can read yet, or none at all
  // if the commit fails.
  // (A key whose commit was answered, kept pending only for the lookup in
  // flight, names a job that is kept when that job is live.)
  for (const NewJob& n : jobs) {
    if (n.key.empty()) continue;
    const std::string k = KeyOf(topic, n.key);
    auto pending = pending_keys_.find(k);
    if (pending == pending_keys_.end()) continue;
    const bool settled = std::find(settled_keys_.begin(), settled_keys_.end(),
                                   std::pair{k, pending->second}) != settled_keys_.end();
    if (settled && FindLive(pending->second) != nullptr) continue;
    key_waiters_[k].push_back({topic, std::move(jobs), std::move(done), std::move(also)});
    return;
  }
  if (const size_t n = jobs.size(); !home_->IdsAtHand(n)) {
    home_->WaitIds(n, [this, topic, jobs = std::move(jobs), keys, done = std::move(done),
                       also = std::move(also)](const Status& s) mutable {
      if (!s.ok()) return done(s);
      SubmitNow(topic, std::move(jobs), keys, std::move(done), std::move(also));
    });
    return;
  }
  const Tube* tube = FindTube(topic);
  const int64_t now_us = clock_.WallMicros();
  const int64_t now_ms = now_us / 1000;
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
      auto existing = keys.find(n.key);
      if (existing == keys.end()) return done(Status::Internal("key not looked up"));
      if (const auto& rec = existing->second) {
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
    r.id = home_->NextId();
    r.tube = topic;
    r.priority = n.priority;
    // A past time to run at is now; a delay ends at its microsecond.
    const int64_t due_us =
        n.run_at_ms ? std::max(*n.run_at_ms * 1000, now_us) : now_us + n.delay_ms * 1000;
    r.run_at_ms = n.run_at_ms ? *n.run_at_ms : CeilMs(due_us);
    r.due_ms = CeilMs(due_us);
    r.delay_ms = CeilMs(due_us - now_us);  // 0: ready now
    r.state = r.delay_ms > 0 ? StoredState::kDelayed : StoredState::kReady;
    r.ttr_ms = ttr_ms;
    r.created_ms = now_ms;
    r.key = std::move(n.key);
    r.spec = EncodeSpec(n.spec);
    r.push = n.spec.target.has_value();
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
    j->due_us = due_us;
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
    // Published before their keys settle: a submission waiting on a key
    // looks it up again at once, and must find the job it names live.
    for (Job* j : created) Publish(j, s);
    for (Job* j : created) {
      if (j->extra && !j->extra->key.empty()) SettleKey(KeyOf(topic, j->extra->key), j->id);
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

void Engine::ReserveJob(Client* c, uint64_t id, Reply<JobView> done) {
  FindOrLoad(
      id, [](const Job& j) { return j.state != JobState::kReserved; },
      [this, c, done = std::move(done)](Result<Job*> found) {
        if (!found.ok()) return done(found.status());
        Job* j = found.value();
        Grant(c, j);
        home_->ReservedById(j, std::move(done));
      },
      c);
}

void Engine::Delete(Client* c, uint64_t id, Done done) {
  FindOrLoad(
      id, [c](const Job& j) { return j.state != JobState::kReserved || j.reserver == c; },
      [this, done = std::move(done)](Result<Job*> found) mutable {
        if (!found.ok()) return done(found.status());
        Job* j = found.value();
        const bool held = j->state == JobState::kReserved;
        // Deleting the job one holds finishes it; deleting any other job
        // cancels it, exactly as DELETE /v1/jobs/{id} does: a job that never
        // ran is never reported done, and its key is free at once.
        held ? Finish(j, std::move(done)) : Cancel(j, std::move(done));
      },
      c);
}

void Engine::Release(Client* c, uint64_t id, uint32_t priority, int64_t delay_ms, Done done) {
  Job* j = ReservedBy(c, id);
  if (j == nullptr) return done(Status::NotFound("job not reserved by this client"));
  Requeue(j, priority, delay_ms, std::move(done));
}

void Engine::Bury(Client* c, uint64_t id, uint32_t priority, Done done) {
  Job* j = ReservedBy(c, id);
  if (j == nullptr) return done(Status::NotFound("job not reserved by this client"));
  BuryHeld(j, priority, std::move(done));
}

void Engine::Touch(Client* c, uint64_t id, Done done) {
  Job* j = ReservedBy(c, id);
  if (j == nullptr) return done(Status::NotFound("job not reserved by this client"));
  Extend(j, std::move(done));
}

void Engine::KickJob(uint64_t id, Done done) {
  FindOrLoad(
      id,
      [](const Job& j) { return j.state == JobState::kBuried || j.state == JobState::kDelayed; },
      [this, done = std::move(done)](Result<Job*> found) mutable {
        if (!found.ok()) return done(found.status());
        KickOne(found.value(), /*fresh_budget=*/false, std::move(done));
      });
}

void Engine::Kick(Client* c, uint64_t bound, std::function<void(Result<uint64_t>)> done) {
  home_->Kick(c, bound, std::move(done));
}

// Picks the jobs to kick from memory; when it needs delayed jobs beyond the
// horizon, reads them aside and picks again with the rows (`far`) in hand.
void Engine::KickTube(Client* c, const std::string& name, uint64_t bound,
                      std::optional<std::pair<std::vector<JobRecord>, uint64_t>> far,
                      Reply<uint64_t> done) {
  Tube* t = FindTube(name);
  if (t == nullptr) return done(uint64_t{0});
  std::vector<Job*> kicked;
  if (t->buried_count() > 0) {
    return KickBuried(c, name, bound, std::move(done));
  } else {
    for (auto it = t->delayed.begin(); it != t->delayed.end() && kicked.size() < bound; ++it) {
      kicked.push_back(*it);
    }
    if (kicked.size() < bound && t->far_delayed > 0 && !far) {
      Pin(c);  // the client's next command waits for the kick (Reading)
      return Aside(
          [&store = store_, name, after = loaded_minute_ - 1, limit = bound - kicked.size() + 64] {
            return store.FarDelayed(name, after, limit);
          },
          [this, c, name, bound, done = std::move(done)](Result<std::vector<JobRecord>> rows,
                                                         uint64_t since) mutable {
            if (!Unpin(c)) return done(Status::Unavailable("the client hung up"));
            if (!rows.ok()) return done(rows.status());
            KickTube(c, name, bound, std::make_pair(std::move(rows).value(), since),
                     std::move(done));
          });
    }
    if (far) {
      for (const JobRecord& rec : far->first) {
        if (kicked.size() >= bound) break;
        // Skips jobs in memory now, or changed in memory since the read.
        if (jobs_.count(rec.id) || LeftSince(rec.id, far->second) || !IsFar(rec) || !Sound(rec)) {
          continue;
        }
        kicked.push_back(MaterializeFar(rec));
      }
    }
  }
  KickAll(std::move(kicked), std::move(done));
}

// Buried jobs in bury order, all at once (a kick answered in pieces would
// let a client's next commands in between): those beyond the window are
// read in first, as many as the kick needs (again while a read brings more:
// one answered aside may stop short of jobs that went cold meanwhile).
void Engine::KickBuried(Client* c, const std::string& name, uint64_t bound, Reply<uint64_t> done,
                        std::optional<size_t> had) {
  Tube* t = FindTube(name);
  if (t == nullptr || bound == 0) return done(uint64_t{0});
  const Window& w = t->windows[static_cast<int>(store::JobSet::kBuried)];
  std::vector<Job*> kicked;
  for (auto it = t->buried.begin(); it != t->buried.end() && kicked.size() < bound; ++it) {
    if (w.cold > 0 && SetKeyOf(**it) > w.edge) break;
    kicked.push_back(*it);
  }
  if (kicked.size() < bound && w.cold > 0 && (!had || kicked.size() > *had)) {
    Pin(c);  // the client's next command waits for the kick (Reading)
    return WhenRefilled(
        t, store::JobSet::kBuried,
        [this, c, name, bound, done = std::move(done), n = kicked.size()](const Status& s) mutable {
          if (!Unpin(c)) return done(Status::Unavailable("the client hung up"));
          if (!s.ok()) return done(s);
          KickBuried(c, name, bound, std::move(done), n);
        },
        bound - kicked.size());
  }
  KickAll(std::move(kicked), std::move(done));
}

void Engine::KickAll(std::vector<Job*> kicked, Reply<uint64_t> done) {
  if (kicked.empty()) return done(uint64_t{0});
  // KICKED counts the kicks the store took: a failed one is undone (Resync),
  // and only when none took is the failure the answer.
  struct Join {
    size_t left;
    uint64_t kicked = 0;
    Status status;
    std::function<void(Result<uint64_t>)> done;
  };
  auto join = std::make_shared<Join>(Join{kicked.size(), 0, Status::Ok(), std::move(done)});
  for (Job* j : kicked) {
    KickOne(j, /*fresh_budget=*/false, [join](const Status& s) {
      if (s.ok()) {
        ++join->kicked;
      } else {
        join->status = s;
      }
      if (--join->left > 0) return;
      if (join->kicked > 0) return join->done(join->kicked);
      join->done(join->status);
    });
  }
}

void Engine::Modify(uint64_t id, const JobPatch& patch, Done done) {
  FindOrLoad(
      id, [](const Job& j) { return j.state != JobState::kReserved; },
      [this, patch, done = std::move(done)](Result<Job*> found) mutable {
        if (!found.ok()) return done(found.status());
        Edit(found.value(), patch, std::move(done));
      });
}

void Engine::Remove(uint64_t id, Done done) {
  FindOrLoad(
      id, [](const Job& j) { return j.state != JobState::kReserved; },
      [this, id, done = std::move(done)](Result<Job*> found) mutable {
        if (found.ok()) return Cancel(found.value(), std::move(done));
        if (found.status().code() != StatusCode::kNotFound || jobs_.count(id)) {
          return done(found.status());
        }
        // A done job, kept as history: removing it frees its key now rather
        // than at the end of its retention.
        Aside([&store = store_, id] { return store.Get(id); },
              [this, id, done = std::move(done)](Result<std::optional<JobRecord>> r,
                                                 uint64_t since) mutable {
                if (jobs_.count(id) || LeftSince(id, since)) return Remove(id, std::move(done));
                if (!r.ok()) return done(r.status());
                if (!r.value() || r.value()->state != StoredState::kDone) {
                  return done(Status::NotFound("no such job"));
                }
                store_.Submit(Mutation::Delete(id), std::move(done));
              });
      });
}

void Engine::RunNow(uint64_t id, Done done) {
  FindOrLoad(
      id, [](const Job& j) { return j.state == JobState::kDelayed || j.state == JobState::kReady; },
      [this, done = std::move(done)](Result<Job*> found) mutable {
        if (!found.ok()) return done(found.status());
        Job* j = found.value();
        if (j->state == JobState::kReady) {
          home_->Unused(j);  // read for nothing
          return done(Status::Ok());
        }
        RunEarly(j, std::move(done));
      });
}

void Engine::BuryJob(uint64_t id, std::optional<uint32_t> priority, Done done) {
  FindOrLoad(
      id,
      [holder = http_holder_](const Job& j) {
        return j.state == JobState::kDelayed || j.state == JobState::kReady ||
               (j.state == JobState::kReserved && j.reserver == holder);
      },
      [this, priority, done = std::move(done)](Result<Job*> found) mutable {
        if (!found.ok()) return done(found.status());
        Job* j = found.value();
        // Held over HTTP: bury without a lease has always buried it.
        if (j->state == JobState::kReserved) {
          return BuryHeld(j, priority.value_or(j->priority), std::move(done));
        }
        Park(j, priority.value_or(j->priority), std::move(done));
      });
}

void Engine::Retry(uint64_t id, Done done) {
  // Buried jobs are in memory on one node, rows in cluster mode.
  auto retry = [this, done = std::move(done)](Result<Job*> found) mutable {
    if (found.status().code() == StatusCode::kConflict) {
      return done(Status::Conflict(std::string("job is not a dead letter (buried)")));
    }
    if (!found.ok()) return done(found.status());
    KickOne(found.value(), /*fresh_budget=*/true, std::move(done));
  };
  home_->FindBuried(id, std::move(retry));
}

Result<JobInfo> Engine::AdoptReservation(Client* c, uint64_t id) {
  Job* j = ReservedBy(c, id);
  if (j == nullptr) return Status::NotFound("reservation lost");
  c->reserved.erase(j);
  j->reserver = http_holder_;
  http_holder_->reserved.insert(j);
  return Info(*j);
}

void Engine::SettleHttp(uint64_t id, uint32_t lease, Settle how, std::optional<uint32_t> priority,
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
      return Requeue(j, priority.value_or(j->priority), delay_ms, std::move(done));
    case Settle::kBury:
      return BuryHeld(j, priority.value_or(j->priority), std::move(done));
    case Settle::kTouch:
      return Touch(http_holder_, id, std::move(done));
  }
}

std::optional<PushLease> Engine::TakePush(const std::string& topic) {
  Tube* t = FindTube(topic);
  Job* j = nullptr;
  if (t != nullptr && !Paused(t)) {
    for (Job* ready : t->push_ready) {
      // In cluster mode a push job is this node's once claimed for it; one
      // made ready here is being written back, for its shard's owner.
      if (home_->Dispatchable(*ready)) {
        j = ready;
        break;
      }
    }
  }
  // Beyond a window the first push job may be in the store (never in
  // cluster mode, which keeps none): delivered once read.
  if (t != nullptr && FirstOf(t, store::JobSet::kPushReady) == nullptr) j = nullptr;
  if (j == nullptr) {
    home_->NoPushReady(topic);
    return std::nullopt;
  }
  // The reservation outlives the request's own timeout, so it runs out only
  // when the dispatcher is gone (it then returns to ready and is redelivered).
  Hold(j, push_holder_, j->extra->spec->target->timeout_ms + options_.push_ttr_margin_ms);
  PushLease lease;
  lease.id = j->id;
  lease.attempt = j->counters.reserves;
  lease.topic = t->name;
  lease.due_ms = j->due_ms();
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

void Engine::PauseTube(const std::string& name, int64_t delay_ms, Done done) {
  if (FindTube(name) == nullptr) return done(Status::NotFound("no such tube"));
  // The pause takes effect once durable, so a failed write changes nothing.
  // The pause counts from the command, not from the commit.
  const int64_t start_us = clock_.SteadyMicros();
  store_.Submit(Mutation::PauseTube(name, delay_ms, clock_.WallMillis() + delay_ms),
                [this, name, delay_ms, start_us, done = std::move(done)](const Status& s) {
                  Tube* t = FindTube(name);
                  if (s.ok() && t != nullptr) {
                    t->pause_ms = delay_ms;
                    // beanstalkd pauses for at least a moment even when asked for 0 s.
                    t->unpause_us = start_us + std::max<int64_t>(delay_ms * 1000, 1);
                    ++t->pauses;
                    Schedule(t->timer, TickAtSteady(t->unpause_us));
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
                    Emit(t, JobEventKind::kReady, nullptr);
                  }
                  done(s);
                });
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

void Engine::PurgeDone() {
  // Lost to a power cut, a purge only leaves records for the next one.
  store_.Submit(Mutation::PurgeDone(clock_.WallMillis() - options_.done_retention_ms).Written(),
                [](const Status& s) {
                  if (!s.ok()) spdlog::warn("purging done jobs: {}", s.ToString());
                });
}

}  // namespace delayd::engine
