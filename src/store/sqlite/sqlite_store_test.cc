// What only the SQLite store does; the Store contract both stores keep is
// tested in store/store_test.cc.
#include "store/sqlite/sqlite_store.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "store/testing/inbox.h"
#include "store/testing/test_dir.h"

namespace delayd::store {
namespace {

TEST(SqliteStoreTest, DamagedFileIsAClearErrorNotACrash) {
  const std::filesystem::path dir = testing::FreshTestDir("store");
  {
    FILE* f = fopen((dir / "delayd.db").c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::string junk(8192, 'x');
    fwrite(junk.data(), 1, junk.size(), f);
    fclose(f);
  }
  testing::Inbox inbox;
  auto r = SqliteStore::Open({.path = (dir / "delayd.db").string()}, inbox.executor());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kIoError);
  std::filesystem::remove_all(dir);
}

// A database of 0.3 (before the windows) opens with its push jobs told
// apart from pull ones and its buried jobs in id order, so that ScanSet
// reads them as the engine wrote them.
TEST(SqliteStoreTest, ADatabaseFromBeforeTheWindowsIsReadInItsOrder) {
  const std::filesystem::path dir = testing::FreshTestDir("store");
  const std::string path = (dir / "delayd.db").string();
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    const char* old = R"sql(
CREATE TABLE jobs (id INTEGER PRIMARY KEY, tube TEXT NOT NULL, pri INTEGER NOT NULL,
  state INTEGER NOT NULL, due_ms INTEGER NOT NULL, due_min INTEGER NOT NULL,
  delay_ms INTEGER NOT NULL, ttr_ms INTEGER NOT NULL, created_ms INTEGER NOT NULL,
  reserves INTEGER NOT NULL, timeouts INTEGER NOT NULL, releases INTEGER NOT NULL,
  buries INTEGER NOT NULL, kicks INTEGER NOT NULL, body BLOB NOT NULL, key TEXT, spec TEXT,
  attempt_log TEXT, last_error TEXT, done_ms INTEGER, run_at_ms INTEGER);
INSERT INTO jobs VALUES (1, 't', 0, 0, 0, 0, 0, 1000, 0, 0, 0, 0, 0, 0, 'a', NULL,
  '{"target":{"url":"http://127.0.0.1:9/x"}}', NULL, NULL, NULL, 0);
INSERT INTO jobs VALUES (2, 't', 0, 0, 0, 0, 0, 1000, 0, 0, 0, 0, 0, 0, 'b', NULL,
  '{"target":null,"retry":{"max_attempts":3}}', NULL, NULL, NULL, 0);
INSERT INTO jobs VALUES (3, 't', 0, 0, 0, 0, 0, 1000, 0, 0, 0, 0, 0, 0, 'c', NULL,
  'not json', NULL, NULL, NULL, 0);
INSERT INTO jobs VALUES (4, 't', 0, 2, 0, 0, 0, 1000, 0, 0, 0, 0, 0, 0, 'd', NULL, NULL,
  NULL, NULL, NULL, 0);
INSERT INTO jobs VALUES (5, 't', 0, 2, 0, 0, 0, 1000, 0, 0, 0, 0, 0, 0, 'e', NULL, NULL,
  NULL, NULL, NULL, 0);
)sql";
    ASSERT_EQ(sqlite3_exec(db, old, nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
    sqlite3_close(db);
  }
  testing::Inbox inbox;
  auto store = SqliteStore::Open({.path = path}, inbox.executor());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto ids = [&](JobSet set) {
    auto rows = (*store)->ScanSet("t", set, {}, 10);
    EXPECT_TRUE(rows.ok()) << rows.status().ToString();
    std::vector<uint64_t> out;
    for (const JobRecord& r : rows.value()) out.push_back(r.id);
    return out;
  };
  EXPECT_EQ(ids(JobSet::kPushReady), (std::vector<uint64_t>{1}));
  EXPECT_EQ(ids(JobSet::kReady), (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(ids(JobSet::kBuried), (std::vector<uint64_t>{4, 5}));
  auto r = (*store)->Recover(0);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->max_bury_seq, 5u);
  store->reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace delayd::store
