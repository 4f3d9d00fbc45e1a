// Windows: a tube's ready jobs (of each kind) and buried jobs are held in
// memory up to a window of them; the rest stay in the store, counted, and
// are read back in their order as the window drains (doc/engine.md,
// "Windows"). So memory is bounded by tubes and windows, not by a backlog
// nobody reserves.
//
// A job leaves memory for the store ("goes cold") only from the end of its
// set and only once everything about it is stored (no write in flight, its
// counts written); a refill reads the keys after the edge, in the set's
// order. Both happen in SettleWindows, on a turn of the loop of their own,
// so no caller ever holds a job that goes cold under it.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "engine/engine.h"

namespace delayd::engine {

using store::JobRecord;
using store::JobSet;
using store::SetKey;

namespace {

// The key just before `k`: no job's key lies between the two, ids being
// unique and at least 1.
SetKey Before(SetKey k) { return {k.major, k.id - 1}; }

// How long a refill whose read failed waits before trying again.
constexpr int64_t kRefillRetryUs = 1'000'000;

SetKey KeyOfRecord(const JobRecord& r, JobSet s) {
  return {s == JobSet::kBuried ? r.bury_seq : r.priority, r.id};
}

// (The bound is GCC's: it sees a fourth JobSet otherwise.)
Window& WindowOf(Tube* t, JobSet s) {
  return t->windows[std::min(static_cast<int>(s), store::kJobSets - 1)];
}

}  // namespace

JobSet Engine::SetOf(const Job& j) {
  if (j.state == JobState::kBuried) return JobSet::kBuried;
  return j.push() ? JobSet::kPushReady : JobSet::kReady;
}

SetKey Engine::SetKeyOf(const Job& j) {
  return {j.state == JobState::kBuried ? j.bury_seq : j.priority, j.id};
}

namespace {

// `f` applied to the tube's set `s` (the three are sets of different orders).
template <class T, class F>
auto WithSet(T* t, JobSet s, F f) {
  switch (s) {
    case JobSet::kReady:
      return f(t->ready);
    case JobSet::kPushReady:
      return f(t->push_ready);
    case JobSet::kBuried:
      break;
  }
  return f(t->buried);
}

Job* First(Tube* t, JobSet s) {
  return WithSet(t, s, [](auto& set) { return set.empty() ? nullptr : *set.begin(); });
}

Job* Last(Tube* t, JobSet s) {
  return WithSet(t, s, [](auto& set) { return set.empty() ? nullptr : *set.rbegin(); });
}

}  // namespace

size_t Engine::SetSize(const Tube* t, JobSet s) const {
  return WithSet(t, s, [](const auto& set) { return set.size(); });
}

Job* Engine::FirstOf(Tube* t, JobSet s) {
  Job* first = First(t, s);
  const Window& w = WindowOf(t, s);
  if (w.cold == 0) return first;
  if (first != nullptr && SetKeyOf(*first) <= w.edge) return first;
  WindowDue(t);  // cold jobs come first: read them
  return nullptr;
}

void Engine::Entered(const Job* j) {
  if (window_ == 0) return;
  const JobSet s = SetOf(*j);
  const Window& w = WindowOf(j->tube, s);
  if ((w.cold > 0 && SetKeyOf(*j) > w.edge) || SetSize(j->tube, s) > window_) WindowDue(j->tube);
}

void Engine::Left(Tube* t, JobSet s) {
  if (window_ == 0) return;
  const Window& w = WindowOf(t, s);
  if (w.cold > 0 && SetSize(t, s) < window_ / 2 + 1) WindowDue(t);
}

void Engine::WindowDue(Tube* t) {
  if (window_ == 0 || t->window_due) return;
  t->window_due = true;
  windows_due_.push_back(t);
  Schedule(window_timer_, NowTick());
}

void Engine::WhenRefilled(Tube* t, JobSet s, std::function<void(const Status&)> then, size_t want) {
  Window& w = WindowOf(t, s);
  // A read ahead is taken now rather than waited for: on a store that reads
  // at once otherwise, no later command of a client may come in between.
  if (w.ahead) TakeAhead(t, s);
  if (w.cold == 0) return then(Status::Ok());
  w.want = std::max(w.want, want);
  if (w.reading) return w.queued.push_back(std::move(then));  // the next read's
  w.waiting.push_back(std::move(then));
  Refill(t, s);
}

void Engine::SettleWindows() {
  std::vector<Tube*> due;
  due.swap(windows_due_);
  std::vector<std::string> names;
  for (Tube* t : due) names.push_back(t->name);
  for (Tube* t : due) {
    t->window_due = false;
    for (JobSet s : {JobSet::kReady, JobSet::kPushReady, JobSet::kBuried}) {
      Evict(t, s);
      Refill(t, s);
    }
  }
  // By name: a call a refill answered may have dropped a tube already.
  for (const std::string& name : names) {
    if (Tube* t = FindTube(name); t != nullptr && !t->window_due) MaybeDropTube(t);
  }
}

// From the end of the set, while the set is larger than the window or its
// last job sorts after the edge. A job with a write in flight stops it: its
// WriteDone looks again (Entered); so does a refill someone waits for.
void Engine::Evict(Tube* t, JobSet s) {
  Window& w = WindowOf(t, s);
  // A kick or peek waits for a refill: what it needs stays (the window may
  // exceed its size until then).
  if (!w.waiting.empty() || !w.queued.empty()) return;
  while (Job* x = Last(t, s)) {
    const SetKey k = SetKeyOf(*x);
    if (SetSize(t, s) <= window_ && (w.cold == 0 || k <= w.edge)) break;
    if (x->pending_writes > 0 || x->diverged) break;  // its WriteDone looks again
    if (x->unstored) {
      if (w.storing == 0) StoreBeyondWindow(t, s);
      break;
    }
    Detach(x);
    if (w.cold == 0 || k <= w.edge) w.edge = Before(k);
    ++w.cold;
    if (s != JobSet::kBuried && x->priority < kUrgentThreshold) ++w.cold_urgent;
    if (w.reading && (!w.floor || k < *w.floor)) w.floor = k;
    --t->jobs;
    Forget(x);
  }
}

// Every job Evict would take but for what its row lacks is written at once
// (not one a turn), and goes cold on a later settling, which its WriteDone
// asks for (Entered). A job due beyond the window was written when it fired
// (Fired); these are the few that were not, or that memory changed since.
void Engine::StoreBeyondWindow(Tube* t, JobSet s) {
  Window& w = WindowOf(t, s);
  std::vector<Job*> unstored;
  WithSet(t, s, [&](const auto& set) {
    size_t over = set.size() > window_ ? set.size() - window_ : 0;
    for (auto it = set.rbegin(); it != set.rend(); ++it) {
      Job* x = *it;
      if (over == 0 && (w.cold == 0 || SetKeyOf(*x) <= w.edge)) break;
      if (over > 0) --over;
      if (x->unstored && x->pending_writes == 0 && !x->diverged) unstored.push_back(x);
    }
  });
  w.storing += unstored.size();
  for (Job* x : unstored) {
    // Answered before the write's WriteDone, while the job keeps its tube.
    Write(x, store::Mutation::Update(Record(*x)).Written(),
          [this, t, s](const Status&) { --WindowOf(t, s).storing; });
  }
}

void Engine::Refill(Tube* t, JobSet s) {
  Window& w = WindowOf(t, s);
  if (w.reading || w.cold == 0) return;
  const size_t in_memory = SetSize(t, s);
  Job* first = First(t, s);
  const bool first_is_cold = first == nullptr || SetKeyOf(*first) > w.edge;
  if (in_memory > window_ / 2 && !first_is_cold && w.waiting.empty()) return;
  const size_t limit = std::max(
      {window_ > in_memory ? window_ - in_memory : 0, window_ / 2 + 1, std::exchange(w.want, 0)});
  w.reading = true;
  w.floor.reset();
  const SetKey after = w.edge;
  if (w.waiting.empty()) {
    // Nobody waits: read on the store's thread for it, if it has one, while
    // the window's first jobs still serve.
    const uint64_t since = left_.Begin();
    const uint64_t n = ++aheads_;
    auto read = store_.ScanSetAhead(t->name, s, after, limit,
                                    [this, tube = t->name, s, n] { AheadAnswered(tube, s, n); });
    if (read) {
      w.ahead = Window::Ahead{std::move(read), after, limit, since, n};
      return;
    }
    left_.End(since);
  }
  Aside([&store = store_, tube = t->name, s, after,
         limit] { return store.ScanSet(tube, s, after, limit); },
        [this, t, s, after, limit](Result<std::vector<JobRecord>> rows, uint64_t since) {
          Refilled(t, s, after, limit, std::move(rows), since);
        });
}

void Engine::AheadAnswered(const std::string& tube, JobSet s, uint64_t n) {
  Tube* t = FindTube(tube);
  if (t == nullptr) return;
  const Window& w = WindowOf(t, s);
  if (w.ahead && w.ahead->n == n) TakeAhead(t, s);
}

void Engine::TakeAhead(Tube* t, JobSet s) {
  Window& w = WindowOf(t, s);
  Window::Ahead a = std::move(*w.ahead);
  w.ahead.reset();
  Refilled(t, s, a.after, a.limit, a.read->Take(), a.since);
  left_.End(a.since);
}

// Rows come in the set's order after `after`. A row is skipped when its job
// is in memory, or was and left since the read (the row may predate what
// made it leave); the edge moves to the last row taken, but stays below
// the least key that went cold meanwhile.
void Engine::Refilled(Tube* t, JobSet s, SetKey after, size_t limit,
                      Result<std::vector<JobRecord>> rows, uint64_t since, bool recovering) {
  Window& w = WindowOf(t, s);
  w.reading = false;
  const std::optional<SetKey> floor = std::exchange(w.floor, std::nullopt);
  std::vector<std::function<void(const Status&)>> waiting;
  waiting.swap(w.waiting);
  if (!rows.ok()) {
    if (!window_read_failing_) {
      spdlog::error("tube {}: reading its {} jobs beyond the window: {}; retrying every second",
                    t->name, s == JobSet::kBuried ? "buried" : "ready", rows.status().ToString());
    }
    window_read_failing_ = true;
    for (auto& then : waiting) then(rows.status());
    for (auto& then : std::exchange(w.queued, {})) then(rows.status());
    // Tried again in a second, or sooner on the next look at the tube (a
    // take, a write), never in a loop of its own.
    if (!t->window_due) {
      t->window_due = true;
      windows_due_.push_back(t);
    }
    Schedule(window_retry_timer_, TickAtSteady(clock_.SteadyMicros() + kRefillRetryUs));
    return;
  }
  if (window_read_failing_) spdlog::info("tube {}: reading jobs beyond the window again", t->name);
  window_read_failing_ = false;
  SetKey edge = after;
  bool stopped = false;
  for (const JobRecord& r : *rows) {
    const SetKey k = KeyOfRecord(r, s);
    if (floor && k >= *floor) {
      stopped = true;
      break;
    }
    edge = k;
    // At recovery, nothing has changed since the read: Sound counts a row of
    // an id already in memory (two rows of one id, which two processes
    // writing one PostgreSQL database can leave).
    if (!recovering && (jobs_.count(r.id) != 0 || LeftSince(r.id, since))) continue;
    if (!Sound(r)) {
      if (w.cold > 0) --w.cold;
      continue;
    }
    MaterializeCold(r, /*emit=*/true);
  }
  if (floor) edge = std::min(edge, Before(*floor));
  if (!stopped && !floor && rows->size() < limit) {
    // Read to the end: nothing of the set is cold any more.
    if (w.cold != 0) {
      spdlog::warn("tube {}: {} jobs counted beyond the window were not found", t->name, w.cold);
    }
    w.cold = 0;
    w.cold_urgent = 0;
  }
  w.edge = edge;
  // The edge may have passed jobs in memory without taking any row: the
  // waiters and the dispatcher look again.
  if (Job* first = FirstOf(t, s); first != nullptr && s != JobSet::kBuried) {
    if (s == JobSet::kReady) {
      Serve(t);
    } else {
      Emit(t, JobEventKind::kReady, first);
    }
  }
  for (auto& then : waiting) then(Status::Ok());
  if (!w.queued.empty() && !w.reading) {
    auto queued = std::exchange(w.queued, {});
    if (w.cold == 0) {
      for (auto& then : queued) then(Status::Ok());
    } else {
      for (auto& then : queued) w.waiting.push_back(std::move(then));
      Refill(t, s);
    }
  }
  // More to read, or nothing left to keep the tube: looked at again.
  Job* first = First(t, s);
  const bool more = w.cold > 0 && (!w.waiting.empty() || SetSize(t, s) <= window_ / 2 ||
                                   first == nullptr || SetKeyOf(*first) > w.edge);
  if (more || SetSize(t, s) > window_ || t->refs() == 0) WindowDue(t);
}

Job* Engine::MaterializeCold(const JobRecord& r, bool emit) {
  Job* j = AddJob(r, JobState::kReady);
  const bool buried = r.state == store::StoredState::kBuried;
  Window& w = WindowOf(j->tube, buried ? JobSet::kBuried : SetOf(*j));
  if (w.cold > 0) --w.cold;
  if (!buried && j->priority < kUrgentThreshold && w.cold_urgent > 0) --w.cold_urgent;
  if (buried) {
    Rebury(j);
  } else if (emit) {
    MakeReady(j);
  } else {
    // Taken at once by the caller (a reserve-job, a delete): no one else
    // may be handed it first.
    j->state = JobState::kReady;
    if (j->priority < kUrgentThreshold) ++j->tube->urgent;
    (j->push() ? j->tube->push_ready : j->tube->ready).insert(j);
    Entered(j);
  }
  return j;
}

Status Engine::RecoverSets(const std::vector<store::SetCount>& sets) {
  for (const store::SetCount& c : sets) {
    Tube* t = FindOrMakeTube(c.tube);
    Window& w = WindowOf(t, c.set);
    w.cold += c.jobs;
    w.cold_urgent += c.urgent;
    w.edge = {};
    const size_t limit = window_ == 0 ? c.jobs + 1 : window_;
    auto rows = store_.ScanSet(c.tube, c.set, {}, limit);
    if (!rows.ok()) return rows.status();
    const uint64_t since = left_.Begin();
    Refilled(t, c.set, {}, limit, std::move(rows), since, /*recovering=*/true);
    left_.End(since);
  }
  return Status::Ok();
}

bool Engine::ColdReadyFor(const Client* c) const {
  return std::any_of(c->watch.begin(), c->watch.end(), [&](const Tube* t) {
    return !Paused(t) && t->windows[static_cast<int>(JobSet::kReady)].cold > 0;
  });
}

}  // namespace delayd::engine
