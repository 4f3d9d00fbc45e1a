// Threads named for what they do, so that an operator's `top -H`, `ps -L`,
// `perf` and `taskset` tell the store's writer from a push sender without
// reading CPU times (doc/operations.md, "Threads"). The name is the
// thread's comm in /proc/PID/task/TID/comm; Linux keeps 15 bytes of it.
//
// The event loop is the process's first thread and keeps the process's
// name: `pgrep delayd` and `ps -C delayd` match that one.
#pragma once

#include <string>
#include <string_view>
#include <thread>
#include <utility>

namespace delayd {

// Names the calling thread `name`, cut to the 15 bytes Linux keeps.
void NameThisThread(std::string_view name);

// A thread that names itself `name`, then runs `body`.
template <typename Body>
std::thread StartNamedThread(std::string_view name, Body&& body) {
  return std::thread([name = std::string(name), body = std::forward<Body>(body)]() mutable {
    NameThisThread(name);
    body();
  });
}

}  // namespace delayd
