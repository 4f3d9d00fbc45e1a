// What only the SQLite store does; the Store contract both stores keep is
// tested in store/store_test.cc.
#include "store/sqlite/sqlite_store.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace delayd::store
