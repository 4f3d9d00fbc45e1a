// slow_sync: an LD_PRELOAD shim for benchmarks that adds SLOW_SYNC_US
// microseconds to every fsync and fdatasync, so this machine's disk can
// stand in for a slower one, for delayd and beanstalkd alike:
//
//   SLOW_SYNC_US=2000 LD_PRELOAD=build/bin/libslow_sync.so beanstalkd -b DIR -f 0
#include <dlfcn.h>
#include <time.h>
#include <unistd.h>

#include <cstdlib>

namespace {

long DelayUs() {
  static const long us = [] {
    const char* v = std::getenv("SLOW_SYNC_US");
    return v != nullptr ? std::atol(v) : 0L;
  }();
  return us;
}

void Pause() {
  const long us = DelayUs();
  if (us <= 0) return;
  timespec ts{us / 1'000'000, (us % 1'000'000) * 1000};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

template <typename F>
F Real(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_NEXT, name));
}

}  // namespace

extern "C" int fsync(int fd) {
  static const auto real = Real<int (*)(int)>("fsync");
  const int r = real(fd);
  Pause();
  return r;
}

extern "C" int fdatasync(int fd) {
  static const auto real = Real<int (*)(int)>("fdatasync");
  const int r = real(fd);
  Pause();
  return r;
}
