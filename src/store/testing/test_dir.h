// Test support: an empty directory of the running test's own, for its store.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>

namespace delayd::store::testing {

// <tmp>/delayd-<component>-test-<pid>-<test name>, emptied and created. The
// test removes it in its TearDown, once its store is closed. A
// parameterised test's name holds a '/' ("Name/sqlite"): made a '-', or the
// directory would be nested in one its TearDown leaves behind.
inline std::filesystem::path FreshTestDir(const std::string& component) {
  std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  std::replace(name.begin(), name.end(), '/', '-');
  std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      ("delayd-" + component + "-test-" + std::to_string(::getpid()) + "-" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace delayd::store::testing
