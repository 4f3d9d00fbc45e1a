// IdBlocks on a real PostgreSQL, two nodes taking ids at once: no id is
// handed out twice, ids rise within a node, a wait is served once its
// block comes, and blocks are taken ahead so puts rarely wait.
#include "cluster/id_blocks.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "cluster/testing/flaky_queue.h"
#include "cluster/testing/test_node.h"
#include "store/testing/pg_test_db.h"

namespace delayd::cluster {
namespace {

class IdBlocksTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_FALSE(db_.uri().empty()) << db_.error(); }

  store::testing::PgTestDb db_;
  testing::TestCluster cluster_{db_.uri(), 8};
};

TEST_F(IdBlocksTest, TwoNodesNeverHandOutOneIdAndIdsRiseWithinANode) {
  testing::TestNode& a = cluster_.Start("a");
  testing::TestNode& b = cluster_.Start("b");
  IdBlocks ids_a(*a.store, 64);
  IdBlocks ids_b(*b.store, 64);
  EXPECT_EQ(ids_a.available(), 0u);

  // Each node takes 1000 ids in waits of 1 to 7, as puts would.
  std::map<std::string, std::vector<uint64_t>> got;
  int waits = 0;
  int failed = 0;
  std::function<void(IdBlocks&, const std::string&, int)> take =
      [&](IdBlocks& ids, const std::string& node, int left) {
        if (left <= 0) return;
        const uint64_t n = 1 + static_cast<uint64_t>(left % 7);
        ++waits;
        ids.Wait(n, [&, n, left, node](const Status& s) {
          if (!s.ok()) {
            ++failed;
            return;
          }
          for (uint64_t i = 0; i < n; ++i) got[node].push_back(ids.Next());
          take(ids, node, left - static_cast<int>(n));
        });
      };
  take(ids_a, "a", 1000);
  take(ids_b, "b", 1000);
  ASSERT_TRUE(cluster_.Drive([&] { return got["a"].size() >= 1000 && got["b"].size() >= 1000; }))
      << got["a"].size() << " and " << got["b"].size();
  EXPECT_EQ(failed, 0);
  std::set<uint64_t> all;
  for (auto& [node, ids] : got) {
    EXPECT_TRUE(std::is_sorted(ids.begin(), ids.end())) << node;
    for (uint64_t id : ids) EXPECT_TRUE(all.insert(id).second) << "id " << id << " twice";
  }
  // Blocks are taken ahead, without a wait: half a block stays at hand.
  EXPECT_TRUE(cluster_.Drive([&] { return ids_a.available() >= 32 && ids_b.available() >= 32; }))
      << ids_a.available() << " and " << ids_b.available();
}

// A job stored with an id above every block (an older node, a restore)
// moves the next blocks past it.
TEST_F(IdBlocksTest, BlocksStartAboveEveryStoredId) {
  testing::TestNode& a = cluster_.Start("a");
  store::JobRecord j;
  j.id = 50'000;
  j.tube = "t";
  j.body = "b";
  ASSERT_TRUE(a.Apply(store::Mutation::Insert(j), cluster_.inbox()).ok());
  IdBlocks ids(*a.store, 16);
  bool ready = false;
  ids.Wait(1, [&](const Status& s) {
    EXPECT_TRUE(s.ok()) << s.ToString();
    ready = true;
  });
  ASSERT_TRUE(cluster_.Drive([&] { return ready; }));
  EXPECT_GT(ids.Next(), 50'000u);
}

// A block that cannot be taken fails the waits for it; the next wait takes
// one again.
TEST_F(IdBlocksTest, AFailedTakeFailsItsWaitsAndTheNextWaitTriesAgain) {
  testing::TestNode& a = cluster_.Start("a");
  testing::FlakyQueue flaky(*a.store, cluster_.inbox().executor());
  flaky.fail_takes = 1;
  IdBlocks ids(flaky, 16);
  std::vector<Status> answers;
  ids.Wait(1, [&](const Status& s) { answers.push_back(s); });
  ids.Wait(2, [&](const Status& s) { answers.push_back(s); });
  ASSERT_TRUE(cluster_.Drive([&] { return answers.size() == 2; }));
  EXPECT_EQ(answers[0].code(), StatusCode::kIoError);
  EXPECT_EQ(answers[1].code(), StatusCode::kIoError);
  EXPECT_EQ(ids.available(), 0u);
  bool ready = false;
  ids.Wait(1, [&](const Status& s) {
    EXPECT_TRUE(s.ok()) << s.ToString();
    ready = true;
  });
  ASSERT_TRUE(cluster_.Drive([&] { return ready; }));
  EXPECT_GT(ids.Next(), 0u);
}

}  // namespace
}  // namespace delayd::cluster
