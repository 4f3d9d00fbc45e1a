#include "common/thread_name.h"

#include <pthread.h>

#include <algorithm>
#include <array>

namespace delayd {

void NameThisThread(std::string_view name) {
  std::array<char, 16> kept{};  // Linux's TASK_COMM_LEN, its NUL included
  const size_t n = std::min(name.size(), kept.size() - 1);
  std::copy_n(name.data(), n, kept.data());
  pthread_setname_np(pthread_self(), kept.data());
}

}  // namespace delayd
