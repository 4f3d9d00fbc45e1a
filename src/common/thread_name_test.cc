#include "common/thread_name.h"

#include <gtest/gtest.h>
#include <pthread.h>

#include <array>
#include <future>
#include <string>

namespace delayd {
namespace {

// What ps and top show for `thread` (its /proc/self/task/TID/comm).
std::string CommOf(std::thread& thread) {
  std::array<char, 16> name{};
  EXPECT_EQ(pthread_getname_np(thread.native_handle(), name.data(), name.size()), 0);
  return name.data();
}

// The thread is looked at while its body still waits, so the name must
// have been set by the time StartNamedThread returned, not some time later.
TEST(ThreadNameTest, AThreadIsNamedWhenItStartsAndRunsItsBody) {
  std::promise<void> release;
  bool ran = false;
  std::thread t = StartNamedThread("store-writer", [&, go = release.get_future()] {
    go.wait();
    ran = true;
  });
  EXPECT_EQ(CommOf(t), "store-writer");
  release.set_value();
  t.join();
  EXPECT_TRUE(ran);
}

TEST(ThreadNameTest, ANameBeyondWhatLinuxKeepsIsCutTo15Bytes) {
  std::promise<void> release;
  std::thread t =
      StartNamedThread("a-name-of-twenty-six-bytes", [go = release.get_future()] { go.wait(); });
  EXPECT_EQ(CommOf(t), "a-name-of-twent");
  release.set_value();
  t.join();
}

}  // namespace
}  // namespace delayd
