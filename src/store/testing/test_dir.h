// Test support: an empty directory of the running test's own, for its store.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace delayd::store::testing {

// <tmp>/delayd-<component>-test-<pid>-<test name>, emptied and created. The
// test removes it in its TearDown, once its store is closed.
inline std::filesystem::path FreshTestDir(const std::string& component) {
  std::filesystem::path dir = std::filesystem::temp_directory_path() /
                              ("delayd-" + component + "-test-" + std::to_string(::getpid()) + "-" +
                               ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace delayd::store::testing
