// Threads named for what they do, so that an operator's `top -H`, `ps -L`,
// `perf` and `taskset` tell the store's writer from a push sender without
// reading CPU times (doc/operations.md, "Threads"). The name is the
// thread's comm in /proc/PID/task/TID/comm; Linux keeps 15 bytes of it.
//
// The event loop is the process's first thread and keeps the process's
// name: `pgrep delayd` and `ps -C delayd` match that one.
#pragma once

#include <string_view>
#include <thread>
#include <utility>

namespace delayd {

// Names `thread` `name`, cut to the 15 bytes Linux keeps.
void NameThread(std::thread& thread, std::string_view name);

// A thread that runs `body`, already named `name` when this returns: the
// starting thread names it, so whoever looks right after (an operator, a
// test after /readyz) never sees the name it inherited. The body may run a
// moment under the inherited name; nothing in it reads its own.
template <typename Body>
std::thread StartNamedThread(std::string_view name, Body&& body) {
  std::thread thread(std::forward<Body>(body));
  NameThread(thread, name);
  return thread;
}

}  // namespace delayd
