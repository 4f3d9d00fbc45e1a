// The engine in cluster mode (SharedHome) on in-memory fakes: rows with
// versions (MemoryStore), claims of them (MemorySharedQueue), a claimer
// that serves waiters when told to and id blocks granted by hand, on a
// manual clock. What the real nodes do over PostgreSQL is
// tests/cluster_test.cc's; here each of the home's rules is shown alone.
#include "engine/shared_home.h"

#include <gtest/gtest.h>

#include <deque>
#include <map>

#include "engine/engine.h"
#include "engine/testing/recorder.h"
#include "store/testing/memory_shared_queue.h"
#include "store/testing/memory_store.h"
#include "store/testing/posted_work.h"

namespace delayd::engine {
namespace {

using store::JobRecord;
using store::StoredState;
using store::testing::MemorySharedQueue;
using store::testing::MemoryStore;
using store::testing::PostedWork;
using testing::Recorder;

// engine::Claims as cluster::Claimer keeps it, minus the notices: waiters
// are served, in the order they came, when the test calls Serve(); a job
// returned goes back to ready at once, as Claimer's guarded write does.
class ServedClaims final : public Claims {
 public:
  ServedClaims(MemorySharedQueue& queue, MemoryStore& store, const Clock& clock)
      : queue_(queue), store_(store), clock_(clock) {}

  WaiterId Wait(std::vector<std::string> tubes, Granted granted) override {
    waiters_.emplace(++next_, Waiter{std::move(tubes), std::move(granted)});
    return next_;
  }
  std::optional<JobRecord> TakeSpare(std::vector<std::string>) override { return std::nullopt; }
  void Cancel(WaiterId id) override { waiters_.erase(id); }
  void Resumed(const std::string& tube) override { resumed.push_back(tube); }
  void Return(JobRecord j) override {
    ++returned;
    auto row = store_.rows().find(j.id);
    if (row == store_.rows().end() || row->second.version != j.version) return;
    row->second.state = StoredState::kReady;
    row->second.reserved_by.clear();
    ++row->second.version;
  }

  // Claims a job for each waiter that has one ready; how many were served.
  int Serve() {
    int served = 0;
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      auto rows = queue_.ClaimNow({it->second.tubes, 1, clock_.WallMillis()});
      if (rows.empty()) {
        ++it;
        continue;
      }
      Granted granted = std::move(it->second.granted);
      it = waiters_.erase(it);
      granted(std::move(rows.front()));
      ++served;
    }
    return served;
  }
  size_t waiting() const { return waiters_.size(); }
  int returned = 0;
  std::vector<std::string> resumed;  // Resumed's tubes, in order

 private:
  struct Waiter {
    std::vector<std::string> tubes;
    Granted granted;
  };
  MemorySharedQueue& queue_;
  MemoryStore& store_;
  const Clock& clock_;
  std::map<WaiterId, Waiter> waiters_;
  WaiterId next_ = 0;
};

// engine::IdSource as cluster::IdBlocks keeps it: ids come in blocks the
// test grants; a put waits, in order, until its ids are at hand.
class GrantedIds final : public IdSource {
 public:
  uint64_t available() const override { return end_ - next_; }
  uint64_t Next() override { return next_++; }
  void Wait(uint64_t n, std::function<void(const Status&)> then) override {
    if (available() >= n) return then(Status::Ok());
    waiting_.push_back({n, std::move(then)});
  }
  // A block of `n` ids from `first`.
  void Grant(uint64_t first, uint64_t n) {
    next_ = first;
    end_ = first + n;
    while (!waiting_.empty() && available() >= waiting_.front().first) {
      auto then = std::move(waiting_.front().second);
      waiting_.pop_front();
      then(Status::Ok());
    }
  }

 private:
  uint64_t next_ = 0;
  uint64_t end_ = 0;
  std::deque<std::pair<uint64_t, std::function<void(const Status&)>>> waiting_;
};

class SharedHomeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ids_.Grant(100, 1000);
    engine_ = std::make_unique<Engine>(store_, clock_, EngineOptions{}, [](int64_t) {});
    engine_->JoinCluster(queue_, claims_, ids_);
    ASSERT_TRUE(engine_->Recover().ok());
    ASSERT_TRUE(engine_->clustered());
    c_ = engine_->Connect(&r_);
  }

  uint64_t Put(const std::string& body, uint32_t pri = 100, int64_t ttr_ms = 10'000) {
    auto id =
        work_.Answer<uint64_t>([&](auto done) { engine_->Put(c_, pri, 0, ttr_ms, body, done); });
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    return id.ok() ? *id : 0;
  }
  Status Await(std::function<void(Engine::Done)> op) {
    std::optional<Status> out;
    op([&](const Status& s) { out = s; });
    work_.RunUntil([&] { return out.has_value(); });
    return out.value_or(Status::Internal("not answered"));
  }
  // A row another node wrote.
  void Row(uint64_t id, const std::string& tube, StoredState state, uint32_t pri = 100) {
    JobRecord r;
    r.id = id;
    r.tube = tube;
    r.state = state;
    r.priority = pri;
    r.ttr_ms = 10'000;
    r.due_ms = clock_.WallMillis() + (state == StoredState::kDelayed ? 60'000 : 0);
    r.body = "row " + std::to_string(id);
    store_.rows()[id] = r;
  }
  const JobRecord* Stored(uint64_t id) {
    auto it = store_.rows().find(id);
    return it == store_.rows().end() ? nullptr : &it->second;
  }
  // Reserves on c_, served by a claim.
  uint64_t Reserve() {
    engine_->Reserve(c_, -1);
    EXPECT_EQ(claims_.Serve(), 1);
    const std::string e = r_.Take();
    EXPECT_EQ(e.rfind("reserved ", 0), 0u) << e;
    return e.empty() ? 0 : std::stoull(e.substr(9));
  }

  PostedWork work_;
  ManualClock clock_;
  MemoryStore store_{work_.executor()};
  MemorySharedQueue queue_{store_, work_.executor()};
  ServedClaims claims_{queue_, store_, clock_};
  GrantedIds ids_;
  Recorder r_;
  std::unique_ptr<Engine> engine_;
  Client* c_ = nullptr;
};

TEST_F(SharedHomeTest, PutsWaitInOrderForABlockOfIdsAndLeaveTheJobToTheDatabase) {
  ids_.Grant(0, 0);
  std::vector<Result<uint64_t>> answers;
  for (const char* body : {"a", "b"}) {
    engine_->Put(c_, 1, 0, 1000, body, [&](Result<uint64_t> r) { answers.push_back(r); });
  }
  work_.RunPosted();
  EXPECT_TRUE(answers.empty());
  ids_.Grant(7000, 2);
  work_.RunUntil([&] { return answers.size() == 2; });
  ASSERT_TRUE(answers[0].ok() && answers[1].ok());
  EXPECT_EQ(*answers[0], 7000u);
  EXPECT_EQ(*answers[1], 7001u);
  ASSERT_NE(Stored(7001), nullptr);
  EXPECT_EQ(Stored(7001)->body, "b");
  EXPECT_EQ(Stored(7001)->state, StoredState::kReady);
  EXPECT_EQ(engine_->jobs_in_memory(), 0u);  // a ready job is a row, not memory
}

TEST_F(SharedHomeTest, AReserveIsAClaimAndADeleteIsAnsweredOnceQueued) {
  const uint64_t id = Put("a");
  EXPECT_EQ(claims_.waiting(), 0u);
  EXPECT_EQ(Reserve(), id);
  ASSERT_NE(Stored(id), nullptr);
  EXPECT_EQ(Stored(id)->state, StoredState::kReserved);
  EXPECT_EQ(Stored(id)->reserved_by, "node-a");
  EXPECT_EQ(engine_->jobs_in_memory(), 1u);  // held by this node's client

  std::optional<Status> deleted;
  const uint64_t lingering = store_.lingering_submitted;
  EXPECT_EQ(lingering, 0u);  // a put, answered after its commit, waits for nobody
  engine_->Delete(c_, id, [&](const Status& s) { deleted = s; });
  ASSERT_TRUE(deleted.has_value());  // answered before the commit...
  EXPECT_TRUE(deleted->ok());
  EXPECT_NE(Stored(id), nullptr);  // ...which has not run yet
  // ...and may wait for company in the writer (CommitQueue's linger).
  EXPECT_EQ(store_.lingering_submitted, lingering + 1);
  work_.RunUntil([&] { return Stored(id) == nullptr; });
  EXPECT_EQ(engine_->jobs_in_memory(), 0u);
  EXPECT_EQ(engine_->held_write_failures(), 0u);
}

// A touch writes the new deadline as a reservation of this node's: the
// owners' sweep of a dead node's reservations reads it, and no other node
// may claim the job meanwhile.
TEST_F(SharedHomeTest, ATouchIsWrittenAsThisNodesReservationWithItsNewDeadline) {
  const uint64_t id = Put("a", 100, 5000);
  ASSERT_EQ(Reserve(), id);
  const JobRecord claimed = *Stored(id);
  clock_.AdvanceMillis(3000);
  ASSERT_TRUE(Await([&](auto done) { engine_->Touch(c_, id, done); }).ok());
  work_.RunUntil([&] { return Stored(id)->version == claimed.version + 1; });
  EXPECT_EQ(Stored(id)->state, StoredState::kReserved);
  EXPECT_EQ(Stored(id)->reserved_by, "node-a");
  EXPECT_EQ(Stored(id)->deadline_ms, claimed.deadline_ms + 3000);
  EXPECT_TRUE(queue_.ClaimNow({{"default"}, 1, clock_.WallMillis()}).empty());
}

TEST_F(SharedHomeTest, AHeldJobAnotherNodeTookMeanwhileIsNotDeletedAndTheFailureIsCounted) {
  const uint64_t id = Put("a");
  ASSERT_EQ(Reserve(), id);
  // Its reservation ran out and another node's sweep returned it.
  JobRecord& row = store_.rows()[id];
  row.state = StoredState::kReady;
  ++row.version;

  std::optional<Status> deleted;
  engine_->Delete(c_, id, [&](const Status& s) { deleted = s; });
  ASSERT_TRUE(deleted && deleted->ok());
  work_.RunUntil([&] { return engine_->held_write_failures() == 1; });
  ASSERT_NE(Stored(id), nullptr);
  EXPECT_EQ(Stored(id)->state, StoredState::kReady);  // delivered again
  EXPECT_EQ(engine_->jobs_in_memory(), 0u);
}

TEST_F(SharedHomeTest, AnExpiredReservationIsWrittenBackReadyAndLeavesMemory) {
  const uint64_t id = Put("a", 100, 1000);
  ASSERT_EQ(Reserve(), id);
  const uint64_t version = Stored(id)->version;
  clock_.AdvanceMillis(1001);
  engine_->Tick();
  work_.RunUntil([&] { return Stored(id)->state == StoredState::kReady; });
  EXPECT_EQ(Stored(id)->version, version + 1);  // guarded by the claim's version
  EXPECT_EQ(Stored(id)->counters.timeouts, 1u);
  EXPECT_EQ(engine_->jobs_in_memory(), 0u);
  EXPECT_EQ(Reserve(), id);  // and claimed again
}

TEST_F(SharedHomeTest, ADisconnectWritesHeldJobsBackReady) {
  const uint64_t id = Put("a");
  ASSERT_EQ(Reserve(), id);
  engine_->Disconnect(c_);
  c_ = nullptr;
  work_.RunUntil([&] { return Stored(id)->state == StoredState::kReady; });
  EXPECT_EQ(engine_->jobs_in_memory(), 0u);
}

TEST_F(SharedHomeTest, PeeksAndCountsReadTheRowsOfEveryNode) {
  engine_->Use(c_, "t");
  Row(1, "t", StoredState::kReady, 50);
  Row(2, "t", StoredState::kReady, 5);
  Row(3, "t", StoredState::kBuried);
  Row(4, "t", StoredState::kDelayed);
  auto ready = work_.Answer<JobView>([&](auto done) { engine_->PeekReady(c_, done); });
  ASSERT_TRUE(ready.ok());
  EXPECT_EQ(ready->id, 2u);  // best priority first
  auto buried = work_.Answer<JobView>([&](auto done) { engine_->PeekBuried(c_, done); });
  ASSERT_TRUE(buried.ok());
  EXPECT_EQ(*buried->body, "row 3");
  auto delayed = work_.Answer<JobView>([&](auto done) { engine_->PeekDelayed(c_, done); });
  ASSERT_TRUE(delayed.ok());
  EXPECT_EQ(delayed->id, 4u);
  auto stats = work_.Answer<TubeStats>([&](auto done) { engine_->StatsTube("t", done); });
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->ready, 2u);
  EXPECT_EQ(stats->urgent, 2u);
  EXPECT_EQ(stats->buried, 1u);
  EXPECT_EQ(stats->delayed, 1u);
  // A tube only the database has jobs of is listed.
  Row(5, "elsewhere", StoredState::kReady);
  auto names = work_.Answer<std::vector<std::string>>([&](auto done) { engine_->TubeNames(done); });
  ASSERT_TRUE(names.ok());
  EXPECT_NE(std::find(names->begin(), names->end(), "elsewhere"), names->end());
  auto topic = work_.Answer<TopicInfo>([&](auto done) { engine_->Topic("elsewhere", done); });
  ASSERT_TRUE(topic.ok());
  EXPECT_EQ(topic->ready, 1u);
  auto none = work_.Answer<TopicInfo>([&](auto done) { engine_->Topic("nothing", done); });
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(engine_->jobs_in_memory(), 0u);
}

TEST_F(SharedHomeTest, AKickWritesEachBuriedRowReadyGuardedByItsVersion) {
  engine_->Use(c_, "t");
  Row(1, "t", StoredState::kBuried);
  Row(2, "t", StoredState::kBuried);
  auto kicked = work_.Answer<uint64_t>([&](auto done) { engine_->Kick(c_, 10, done); });
  ASSERT_TRUE(kicked.ok());
  EXPECT_EQ(*kicked, 2u);
  EXPECT_EQ(Stored(1)->state, StoredState::kReady);
  EXPECT_EQ(Stored(2)->state, StoredState::kReady);
  EXPECT_EQ(Stored(1)->version, 1u);
  EXPECT_EQ(engine_->jobs_in_memory(), 0u);
}

TEST_F(SharedHomeTest, ReserveJobOfARowAnotherNodeHoldsIsRefused) {
  Row(1, "default", StoredState::kReserved);
  store_.rows()[1].reserved_by = "node-b";
  store_.rows()[1].deadline_ms = clock_.WallMillis() + 10'000;
  auto r = work_.Answer<JobView>([&](auto done) { engine_->ReserveJob(c_, 1, done); });
  EXPECT_EQ(r.status().code(), StatusCode::kConflict);
  EXPECT_EQ(engine_->jobs_in_memory(), 0u);  // brought in for nothing, and let go
  Row(2, "default", StoredState::kBuried);
  r = work_.Answer<JobView>([&](auto done) { engine_->ReserveJob(c_, 2, done); });
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Stored(2)->state, StoredState::kReserved);
  EXPECT_EQ(Stored(2)->reserved_by, "node-a");
}

TEST_F(SharedHomeTest, APausedTubeIsLeftOutOfClaimsUntilItResumes) {
  const uint64_t id = Put("a");
  ASSERT_TRUE(Await([&](auto done) { engine_->PauseTube("default", 60'000, done); }).ok());
  engine_->Reserve(c_, -1);
  EXPECT_EQ(claims_.waiting(), 0u);  // nothing to claim from
  EXPECT_EQ(claims_.Serve(), 0);
  ASSERT_TRUE(Await([&](auto done) { engine_->ResumeTube("default", done); }).ok());
  EXPECT_EQ(claims_.Serve(), 1);
  EXPECT_EQ(r_.Take(), "reserved " + std::to_string(id) + " a");
}

// No notice says a pause ran out: the engine tells the claims, whose
// claims during the pause found the tube empty, before its waiters claim.
TEST_F(SharedHomeTest, APauseThatRunsOutIsToldToTheClaimsAndItsWaitersClaimAgain) {
  const uint64_t id = Put("a");
  ASSERT_TRUE(Await([&](auto done) { engine_->PauseTube("default", 5'000, done); }).ok());
  engine_->Reserve(c_, -1);
  EXPECT_EQ(claims_.waiting(), 0u);
  claims_.resumed.clear();
  clock_.AdvanceMillis(5'001);
  engine_->Tick();
  EXPECT_EQ(claims_.resumed, std::vector<std::string>{"default"});
  EXPECT_EQ(claims_.Serve(), 1);
  EXPECT_EQ(r_.Take(), "reserved " + std::to_string(id) + " a");
}

TEST_F(SharedHomeTest, AJobClaimedForAClientThatHungUpGoesBack) {
  Put("a");
  engine_->Reserve(c_, -1);
  ASSERT_EQ(claims_.waiting(), 1u);
  engine_->Disconnect(c_);  // cancels its claim
  c_ = nullptr;
  EXPECT_EQ(claims_.waiting(), 0u);
  // A reserve-with-timeout 0 is one claim; its client gone, the job returns.
  Client* other = engine_->Connect(&r_);
  engine_->Reserve(other, 0);
  engine_->Disconnect(other);
  work_.RunPosted();
  EXPECT_EQ(claims_.returned, 1);
  EXPECT_EQ(store_.rows().begin()->second.state, StoredState::kReady);
}

}  // namespace
}  // namespace delayd::engine
