#include "store/commit_queue.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace delayd::store {
namespace {

// A backend that records what it is asked to do. Each mutation is a
// DeleteJob whose id names it. Sync() waits while `sync_gate` is closed, so
// a test can hold commits between written and synced.
class FakeBackend final : public CommitQueue::Backend {
 public:
  Status Commit(CommitQueue::Batch& batch) override {
    std::unique_lock lock(mu_);
    ++commits_waiting_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return commits_allowed_ != 0; });
    --commits_waiting_;
    if (commits_allowed_ > 0) --commits_allowed_;
    std::vector<uint64_t> ids;
    for (auto& p : batch) {
      p.ForEach(
          [&](const Mutation& m) { ids.push_back(std::get<change::DeleteJob>(m.change).id); });
      if (conflicts_.contains(ids.back())) p.status = Status::Conflict("taken");
    }
    batches_.push_back(ids);
    commit_thread_ = std::this_thread::get_id();
    if (fail_commits_ > 0) {
      --fail_commits_;
      return Status::IoError("disk gone (fake)");
    }
    if (unknown_commits_ > 0) {
      --unknown_commits_;
      ++committed_;  // it did commit; the answer was lost
      return Status::Unknown("connection broke at COMMIT (fake)");
    }
    ++committed_;
    return Status::Ok();
  }
  Status Sync() override {
    std::unique_lock lock(mu_);
    ++syncs_waiting_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return sync_open_; });
    --syncs_waiting_;
    ++sync_calls_;
    sync_threads_.push_back(std::this_thread::get_id());
    if (fail_syncs_ > 0) {
      --fail_syncs_;
      return Status::IoError("sync failed (fake)");
    }
    synced_ = committed_;
    return Status::Ok();
  }

  void SetSyncGate(bool open) {
    std::lock_guard lock(mu_);
    sync_open_ = open;
    cv_.notify_all();
  }
  // Lets the next `n` commits through (-1: every one, the default); the
  // others wait in Commit.
  void AllowCommits(int n) {
    std::lock_guard lock(mu_);
    commits_allowed_ = n;
    cv_.notify_all();
  }
  // Waits until a commit waits for AllowCommits.
  void WaitForCommitAtGate() {
    std::unique_lock lock(mu_);
    ASSERT_TRUE(cv_.wait_for(lock, std::chrono::seconds(10), [&] {
      return commits_waiting_ > 0 && commits_allowed_ == 0;
    })) << "no commit came to the gate";
  }
  void Conflict(uint64_t id) {
    std::lock_guard lock(mu_);
    conflicts_.insert(id);
  }
  void FailCommits(int n) {
    std::lock_guard lock(mu_);
    fail_commits_ = n;
  }
  // The next `n` commits are applied but answered kUnknown.
  void LoseCommitAnswers(int n) {
    std::lock_guard lock(mu_);
    unknown_commits_ = n;
  }
  // Settle's verdict on each id in doubt (absent: it cannot tell).
  void Kept(uint64_t id, bool kept) {
    std::lock_guard lock(mu_);
    kept_[id] = kept;
  }
  // Once a test gives a verdict, Settle gives them; before, the default
  // (every failure stands).
  void Settle(CommitQueue::Batch& batch, bool commit_in_flight) override {
    std::lock_guard lock(mu_);
    if (kept_.empty()) return;
    settled_in_flight_ = settled_in_flight_ || commit_in_flight;
    for (auto& p : batch) {
      const uint64_t id = std::get<change::DeleteJob>(p.mutation.change).id;
      auto it = kept_.find(id);
      if (it == kept_.end()) {
        p.status = Status::Unknown("cannot tell (fake)", std::to_string(id));
      } else if (it->second) {
        p.status = Status::Ok();
      }
    }
  }
  bool settled_in_flight() {
    std::lock_guard lock(mu_);
    return settled_in_flight_;
  }
  void FailSyncs(int n) {
    std::lock_guard lock(mu_);
    fail_syncs_ = n;
  }
  std::vector<std::vector<uint64_t>> batches() {
    std::lock_guard lock(mu_);
    return batches_;
  }
  int committed() {
    std::lock_guard lock(mu_);
    return committed_;
  }
  int synced() {  // the commits covered by the last good sync
    std::lock_guard lock(mu_);
    return synced_;
  }
  int sync_calls() {
    std::lock_guard lock(mu_);
    return sync_calls_;
  }
  // Waits until a Sync waits at the closed gate.
  void WaitForSyncAtGate() {
    std::unique_lock lock(mu_);
    ASSERT_TRUE(cv_.wait_for(lock, std::chrono::seconds(10), [&] { return syncs_waiting_ > 0; }))
        << "no sync came to the gate";
  }
  std::thread::id commit_thread() {  // the thread of the last commit
    std::lock_guard lock(mu_);
    return commit_thread_;
  }
  std::vector<std::thread::id> sync_threads() {  // each sync's, in order
    std::lock_guard lock(mu_);
    return sync_threads_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool sync_open_ = true;
  int commits_allowed_ = -1;
  int commits_waiting_ = 0;
  std::set<uint64_t> conflicts_;
  int fail_commits_ = 0;
  int fail_syncs_ = 0;
  int unknown_commits_ = 0;
  std::map<uint64_t, bool> kept_;
  bool settled_in_flight_ = false;
  std::vector<std::vector<uint64_t>> batches_;
  int committed_ = 0;
  int synced_ = 0;
  int sync_calls_ = 0;
  int syncs_waiting_ = 0;
  std::thread::id commit_thread_;
  std::vector<std::thread::id> sync_threads_;
};

class CommitQueueTest : public ::testing::Test {
 protected:
  void Make(CommitQueue::Options options = {}) {
    queue_ = std::make_unique<CommitQueue>(backend_, options, [](std::function<void()> f) { f(); });
  }
  void TearDown() override {
    backend_.SetSyncGate(true);
    backend_.AllowCommits(-1);
    if (queue_) queue_->Close();
  }

  // Submits mutation `id` and records its answer.
  void Put(uint64_t id, Durability d = Durability::kSynced, bool lingers = false) {
    Mutation m = Mutation::Delete(id);
    m.durability = d;
    m.lingers = lingers;
    queue_->Submit(std::move(m), Answer(id));
  }
  void PutLingering(uint64_t id) { Put(id, Durability::kWritten, true); }
  Store::Done Answer(uint64_t id) {
    return [this, id](const Status& s) {
      std::lock_guard lock(mu_);
      answers_.emplace(id, s);
      order_.push_back(id);
      cv_.notify_all();
    };
  }
  // Waits up to `limit` for `pred`, checked whenever an answer comes and every 5 ms.
  template <typename Pred>
  bool WaitFor(Pred pred, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    std::unique_lock lock(mu_);
    while (!pred()) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      cv_.wait_for(lock, std::chrono::milliseconds(5));
    }
    return true;
  }
  bool Answered(uint64_t id) {
    std::lock_guard lock(mu_);
    return answers_.contains(id);
  }
  Status AnswerOf(uint64_t id) {
    std::lock_guard lock(mu_);
    auto it = answers_.find(id);
    return it == answers_.end() ? Status::Internal("no answer") : it->second;
  }
  std::vector<uint64_t> order() {
    std::lock_guard lock(mu_);
    return order_;
  }

  FakeBackend backend_;
  std::unique_ptr<CommitQueue> queue_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, Status> answers_;  // guarded by mu_
  std::vector<uint64_t> order_;         // guarded by mu_
};

TEST_F(CommitQueueTest, AWrittenChangeIsAnsweredAtItsCommitAndASyncedOneOnlyAfterItsSync) {
  Make();
  backend_.SetSyncGate(false);
  Put(1, Durability::kWritten);
  Put(2, Durability::kSynced);
  queue_->Start();
  ASSERT_TRUE(WaitFor([&] { return answers_.contains(1); }));
  EXPECT_TRUE(AnswerOf(1).ok());
  ASSERT_TRUE(WaitFor([&] { return backend_.committed() == 1; }));
  EXPECT_FALSE(Answered(2)) << "a synced change was answered while its sync was held";
  EXPECT_EQ(backend_.synced(), 0);
  backend_.SetSyncGate(true);
  ASSERT_TRUE(WaitFor([&] { return answers_.contains(2); }));
  EXPECT_TRUE(AnswerOf(2).ok());
  EXPECT_EQ(backend_.synced(), 1) << "answered before the sync covering its commit";
}

TEST_F(CommitQueueTest, AWrittenOnlyCommitIsSyncedWithoutFurtherSubmissions) {
  Make({.sync_delay_ms = 20});
  queue_->Start();
  Put(1, Durability::kWritten);
  ASSERT_TRUE(WaitFor([&] { return answers_.contains(1); }));
  ASSERT_TRUE(WaitFor([&] { return queue_->stats().syncs == 1; }))
      << "a written-only commit was never synced";
  EXPECT_EQ(backend_.synced(), 1);
}

TEST_F(CommitQueueTest, ASyncedChangeIsNotHeldByTheDelayOfAnEarlierWrittenOne) {
  Make({.sync_delay_ms = 60'000});
  queue_->Start();
  Put(1, Durability::kWritten);  // the syncer now waits for up to a minute
  ASSERT_TRUE(WaitFor([&] { return answers_.contains(1); }));
  Put(2);
  ASSERT_TRUE(WaitFor([&] { return answers_.contains(2); }))
      << "a synced change waited for the written one's sync delay";
  EXPECT_EQ(backend_.synced(), 2) << "one sync covers both commits";
}

// A serial producer's put: one submission, nothing behind it. The writer
// syncs it itself rather than hand it to the syncer and wait for that
// thread to wake.
TEST_F(CommitQueueTest, ALoneSyncedChangeIsSyncedByTheWriterWithoutAHandOff) {
  Make();
  queue_->Start();
  for (uint64_t id = 1; id <= 3; ++id) {
    Put(id);
    ASSERT_TRUE(WaitFor([&] { return answers_.contains(id); }));
    EXPECT_TRUE(AnswerOf(id).ok());
    EXPECT_EQ(backend_.synced(), static_cast<int>(id)) << "answered before its sync";
  }
  const std::vector<std::thread::id> syncs = backend_.sync_threads();
  ASSERT_EQ(syncs.size(), 3u);
  for (std::thread::id t : syncs) {
    EXPECT_EQ(t, backend_.commit_thread()) << "a lone put's sync was handed to the syncer";
  }
}

// Group commit under load stays as it was: while one batch is being synced
// the next commits, and its sync is the syncer's, never two syncs at once.
TEST_F(CommitQueueTest, WhileALoneChangeIsSyncedTheNextOnesQueueAndShareTheNextSync) {
  Make();
  queue_->Start();
  backend_.SetSyncGate(false);
  Put(1);
  backend_.WaitForSyncAtGate();  // the writer syncs 1 itself
  Put(2);
  Put(3);
  EXPECT_FALSE(Answered(1));
  backend_.SetSyncGate(true);
  ASSERT_TRUE(WaitFor([&] { return answers_.contains(2) && answers_.contains(3); }));
  EXPECT_EQ(order(), (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ(backend_.batches(), (std::vector<std::vector<uint64_t>>{{1}, {2, 3}}))
      << "the changes that came during the sync commit together";
  EXPECT_EQ(backend_.sync_calls(), 2);
  const std::vector<std::thread::id> syncs = backend_.sync_threads();
  ASSERT_EQ(syncs.size(), 2u);
  EXPECT_NE(syncs[1], backend_.commit_thread()) << "a batch of two was synced by the writer";
}

// Changes answered before their commit (Mutation::lingers) wait up to the
// linger for company; one that does not linger ends the wait, as do a full
// batch and Close.
TEST_F(CommitQueueTest, LingeringChangesWaitForCompanyUntilOneThatDoesNotComes) {
  Make({.max_batch = 3, .linger_us = 60'000'000});
  queue_->Start();
  PutLingering(1);
  PutLingering(2);
  // A minute's linger: nothing commits for now.
  EXPECT_FALSE(WaitFor([&] { return backend_.committed() > 0; }, std::chrono::milliseconds(100)));
  Put(3, Durability::kWritten);  // does not linger: all three commit at once, together
  ASSERT_TRUE(WaitFor([&] { return answers_.size() == 3; }));
  EXPECT_EQ(backend_.batches(), (std::vector<std::vector<uint64_t>>{{1, 2, 3}}));
  // A full batch does not wait either.
  PutLingering(4);
  PutLingering(5);
  PutLingering(6);
  ASSERT_TRUE(WaitFor([&] { return answers_.size() == 6; }));
  EXPECT_EQ(backend_.batches().back(), (std::vector<uint64_t>{4, 5, 6}));
  // Nor does Close.
  PutLingering(7);
  queue_->Close();
  EXPECT_TRUE(AnswerOf(7).ok());
  EXPECT_EQ(backend_.batches().back(), (std::vector<uint64_t>{7}));
}

TEST_F(CommitQueueTest, ALingeringChangeAloneCommitsOnceTheLingerRunsOut) {
  Make({.linger_us = 20'000});
  queue_->Start();
  const auto put = std::chrono::steady_clock::now();
  PutLingering(1);
  ASSERT_TRUE(WaitFor([&] { return answers_.contains(1); }));
  EXPECT_GE(std::chrono::steady_clock::now() - put, std::chrono::milliseconds(20));
  EXPECT_EQ(backend_.committed(), 1);
}

TEST_F(CommitQueueTest, WithNoSyncDelayEveryChangeWaitsForTheSync) {
  Make({.sync_delay_ms = 0});
  backend_.SetSyncGate(false);
  queue_->Start();
  Put(1, Durability::kWritten);
  ASSERT_TRUE(WaitFor([&] { return backend_.committed() == 1; }));
  EXPECT_FALSE(Answered(1)) << "the strict policy answered before the sync";
  backend_.SetSyncGate(true);
  ASSERT_TRUE(WaitFor([&] { return answers_.contains(1); }));
  EXPECT_EQ(backend_.synced(), 1);
}

TEST_F(CommitQueueTest, ASubmissionOfSeveralChangesWaitsForItsStrictestOne) {
  Make();
  backend_.SetSyncGate(false);
  queue_->Start();
  Mutation written = Mutation::Delete(1).Written();
  queue_->SubmitAll({std::move(written), Mutation::Delete(2)}, Answer(1));
  ASSERT_TRUE(WaitFor([&] { return backend_.committed() == 1; }));
  EXPECT_EQ(backend_.batches(), (std::vector<std::vector<uint64_t>>{{1, 2}}))
      << "both changes in one commit";
  EXPECT_FALSE(Answered(1));
  backend_.SetSyncGate(true);
  ASSERT_TRUE(WaitFor([&] { return answers_.contains(1); }));
  EXPECT_TRUE(AnswerOf(1).ok());
}

TEST_F(CommitQueueTest, AConflictFailsOnlyItsOwnSubmission) {
  Make();
  backend_.Conflict(2);
  for (uint64_t id : {1, 2, 3}) Put(id);  // queued before the writer starts: one batch
  queue_->Start();
  ASSERT_TRUE(WaitFor([&] { return answers_.size() == 3; }));
  EXPECT_EQ(backend_.batches(), (std::vector<std::vector<uint64_t>>{{1, 2, 3}}));
  EXPECT_TRUE(AnswerOf(1).ok());
  EXPECT_EQ(AnswerOf(2).code(), StatusCode::kConflict);
  EXPECT_TRUE(AnswerOf(3).ok());
}

TEST_F(CommitQueueTest, AFailedCommitFailsItsWholeBatchAndTheNextOneGoesOn) {
  Make();
  backend_.FailCommits(1);
  Put(1, Durability::kWritten);
  Put(2);
  queue_->Start();
  ASSERT_TRUE(WaitFor([&] { return answers_.size() == 2; }));
  EXPECT_EQ(AnswerOf(1).code(), StatusCode::kIoError);
  EXPECT_EQ(AnswerOf(2).code(), StatusCode::kIoError);
  Put(3);
  ASSERT_TRUE(WaitFor([&] { return answers_.contains(3); }));
  EXPECT_TRUE(AnswerOf(3).ok());
  EXPECT_EQ(backend_.committed(), 1);
}

TEST_F(CommitQueueTest, BatchesAreBoundedAndKeepSubmissionOrder) {
  Make({.max_batch = 2});
  for (uint64_t id = 1; id <= 5; ++id) Put(id);
  queue_->Start();
  ASSERT_TRUE(WaitFor([&] { return answers_.size() == 5; }));
  EXPECT_EQ(backend_.batches(), (std::vector<std::vector<uint64_t>>{{1, 2}, {3, 4}, {5}}));
  EXPECT_EQ(order(), (std::vector<uint64_t>{1, 2, 3, 4, 5}));
  const StoreStats stats = queue_->stats();
  EXPECT_EQ(stats.batches, 3u);
  EXPECT_EQ(stats.mutations, 5u);
}

TEST_F(CommitQueueTest, AQueueThatNeverEmptiesDoesNotKeepWhatTheWriterTook) {
  Make({.max_batch = 2});
  backend_.AllowCommits(0);
  for (uint64_t id = 1; id <= 4; ++id) Put(id);
  queue_->Start();
  backend_.WaitForCommitAtGate();  // {1, 2} taken, {3, 4} queued
  // Producers keep ahead of the writer: two more for every batch it takes.
  constexpr uint64_t kRounds = 200;
  uint64_t next = 5;
  for (uint64_t round = 0; round < kRounds; ++round) {
    Put(next++);
    Put(next++);
    backend_.AllowCommits(1);
    backend_.WaitForCommitAtGate();
    ASSERT_GT(queue_->stats().queued, 0u) << "the queue never empties";
    ASSERT_LE(queue_->SlotsForTest(), 8u) << "round " << round;
  }
  backend_.AllowCommits(-1);
  ASSERT_TRUE(WaitFor([&] { return answers_.size() == next - 1; }));
  std::vector<uint64_t> all;
  for (uint64_t id = 1; id < next; ++id) all.push_back(id);
  EXPECT_EQ(order(), all);
  for (const auto& b : backend_.batches()) EXPECT_LE(b.size(), 2u);
}

TEST_F(CommitQueueTest, AFailedSyncFailsTheChangesWaitingForItAndIsTriedAgain) {
  Make({.sync_delay_ms = 5});
  backend_.FailSyncs(1);
  queue_->Start();
  Put(1);  // alone: the writer makes the sync that fails
  ASSERT_TRUE(WaitFor([&] { return answers_.contains(1); }));
  EXPECT_EQ(AnswerOf(1).code(), StatusCode::kIoError) << "answered OK without a sync";
  // The commit is still owed a sync: the syncer tries again by itself.
  ASSERT_TRUE(WaitFor([&] { return backend_.synced() == 1; }));
  EXPECT_GE(backend_.sync_calls(), 2);
}

// A commit whose answer was lost, or a failed sync, leaves writes in doubt:
// the backend's Settle decides each one (kept, not kept, or unknown), and a
// write it learned was not kept fails as a plain I/O error.
TEST_F(CommitQueueTest, WritesInDoubtAreAnsweredAsTheBackendSettlesThem) {
  Make({.sync_delay_ms = 0});
  queue_->Start();
  backend_.LoseCommitAnswers(1);
  backend_.Kept(1, true);
  Put(1);
  ASSERT_TRUE(WaitFor([&] { return answers_.size() == 1; }));
  EXPECT_TRUE(AnswerOf(1).ok()) << AnswerOf(1).ToString();
  EXPECT_TRUE(backend_.settled_in_flight());
  backend_.LoseCommitAnswers(1);
  backend_.Kept(2, false);
  Put(2);
  ASSERT_TRUE(WaitFor([&] { return answers_.size() == 2; }));
  EXPECT_EQ(AnswerOf(2).code(), StatusCode::kIoError) << AnswerOf(2).ToString();
  backend_.FailSyncs(1);
  Put(3);  // no verdict on 3: unknown, with its id
  ASSERT_TRUE(WaitFor([&] { return answers_.size() == 3; }));
  EXPECT_EQ(AnswerOf(3).code(), StatusCode::kUnknown) << AnswerOf(3).ToString();
  EXPECT_EQ(AnswerOf(3).field(), "3");
  Put(4);  // and the queue goes on
  ASSERT_TRUE(WaitFor([&] { return answers_.size() == 4; }));
  EXPECT_TRUE(AnswerOf(4).ok());
}

TEST_F(CommitQueueTest, CloseCommitsSyncsAndAnswersEverythingThenRefuses) {
  Make({.sync_delay_ms = 1000});
  queue_->Start();
  for (uint64_t id = 1; id <= 3; ++id) Put(id, Durability::kWritten);
  queue_->Close();
  EXPECT_EQ(order().size(), 3u);
  EXPECT_EQ(backend_.synced(), backend_.committed()) << "closed with commits not synced";
  Put(4);
  ASSERT_TRUE(Answered(4));
  EXPECT_EQ(AnswerOf(4).code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace delayd::store
