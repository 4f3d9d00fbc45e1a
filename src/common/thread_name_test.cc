#include "common/thread_name.h"

#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fstream>
#include <string>

namespace delayd {
namespace {

// What ps and top show for the calling thread.
std::string CommOfThisThread() {
  std::ifstream in("/proc/self/task/" + std::to_string(syscall(SYS_gettid)) + "/comm");
  std::string comm;
  std::getline(in, comm);
  return comm;
}

TEST(ThreadNameTest, AThreadStartedWithANameShowsItAndRunsItsBody) {
  std::string seen;
  std::thread t = StartNamedThread("store-writer", [&] { seen = CommOfThisThread(); });
  t.join();
  EXPECT_EQ(seen, "store-writer");
}

TEST(ThreadNameTest, ANameBeyondWhatLinuxKeepsIsCutTo15Bytes) {
  std::string seen;
  std::thread t =
      StartNamedThread("a-name-of-twenty-six-bytes", [&] { seen = CommOfThisThread(); });
  t.join();
  EXPECT_EQ(seen, "a-name-of-twent");
}

}  // namespace
}  // namespace delayd
