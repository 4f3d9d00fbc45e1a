#include "common/thread_name.h"

#include <pthread.h>

#include <algorithm>
#include <array>

namespace delayd {

void NameThread(std::thread& thread, std::string_view name) {
  std::array<char, 16> kept{};  // Linux's TASK_COMM_LEN, its NUL included
  const size_t n = std::min(name.size(), kept.size() - 1);
  std::copy_n(name.data(), n, kept.data());
  // Fails only if the thread has already ended, when no one can see it.
  pthread_setname_np(thread.native_handle(), kept.data());
}

}  // namespace delayd
