// Under ThreadSanitizer only: C11 threads, mutexes and condition variables
// as calls of their pthread counterparts, for librdkafka. Debian's
// librdkafka uses C11 threads (thrd_create, mtx_lock, cnd_wait from glibc),
// and glibc implements them with its internal pthread functions, which
// gcc 12's TSan runtime does not intercept: a thread librdkafka starts is
// unknown to TSan, and its first allocation crashes the runtime (SEGV in
// TSan's allocator). Defined in the executable, these take the place of
// glibc's for librdkafka's calls, so TSan sees its threads and their
// synchronisation. Include it in exactly one source file of a binary that
// runs librdkafka (kafka_sender.cc; a test that runs a mock cluster
// without the sender).
#pragma once

#if defined(__SANITIZE_THREAD__)
#include <pthread.h>
#include <threads.h>

#include <cerrno>
#include <cstdint>

namespace delayd::brokers::c11_tsan {

struct Start {
  thrd_start_t func;
  void* arg;
};

inline void* Run(void* p) {
  const Start s = *static_cast<Start*>(p);
  delete static_cast<Start*>(p);
  return reinterpret_cast<void*>(static_cast<intptr_t>(s.func(s.arg)));
}

inline int Code(int rc) {
  switch (rc) {
    case 0:
      return thrd_success;
    case ENOMEM:
      return thrd_nomem;
    case ETIMEDOUT:
      return thrd_timedout;
    case EBUSY:
      return thrd_busy;
    default:
      return thrd_error;
  }
}

inline pthread_mutex_t* M(mtx_t* m) { return reinterpret_cast<pthread_mutex_t*>(m); }
inline pthread_cond_t* C(cnd_t* c) { return reinterpret_cast<pthread_cond_t*>(c); }

static_assert(sizeof(mtx_t) >= sizeof(pthread_mutex_t));
static_assert(sizeof(cnd_t) >= sizeof(pthread_cond_t));
static_assert(sizeof(thrd_t) == sizeof(pthread_t));

}  // namespace delayd::brokers::c11_tsan

extern "C" {

int thrd_create(thrd_t* thr, thrd_start_t func, void* arg) {
  using namespace delayd::brokers::c11_tsan;
  auto* s = new Start{func, arg};
  const int rc = pthread_create(thr, nullptr, Run, s);
  if (rc != 0) delete s;
  return Code(rc);
}

int thrd_join(thrd_t thr, int* res) {
  void* out = nullptr;
  const int rc = pthread_join(thr, &out);
  if (rc == 0 && res != nullptr) *res = static_cast<int>(reinterpret_cast<intptr_t>(out));
  return delayd::brokers::c11_tsan::Code(rc);
}

int mtx_init(mtx_t* m, int type) {
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  if ((type & mtx_recursive) != 0) pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
  const int rc = pthread_mutex_init(delayd::brokers::c11_tsan::M(m), &a);
  pthread_mutexattr_destroy(&a);
  return delayd::brokers::c11_tsan::Code(rc);
}
int mtx_lock(mtx_t* m) {
  return delayd::brokers::c11_tsan::Code(pthread_mutex_lock(delayd::brokers::c11_tsan::M(m)));
}
int mtx_unlock(mtx_t* m) {
  return delayd::brokers::c11_tsan::Code(pthread_mutex_unlock(delayd::brokers::c11_tsan::M(m)));
}
void mtx_destroy(mtx_t* m) { pthread_mutex_destroy(delayd::brokers::c11_tsan::M(m)); }

int cnd_init(cnd_t* c) {
  return delayd::brokers::c11_tsan::Code(
      pthread_cond_init(delayd::brokers::c11_tsan::C(c), nullptr));
}
int cnd_signal(cnd_t* c) {
  return delayd::brokers::c11_tsan::Code(pthread_cond_signal(delayd::brokers::c11_tsan::C(c)));
}
int cnd_broadcast(cnd_t* c) {
  return delayd::brokers::c11_tsan::Code(pthread_cond_broadcast(delayd::brokers::c11_tsan::C(c)));
}
int cnd_wait(cnd_t* c, mtx_t* m) {
  using namespace delayd::brokers::c11_tsan;
  return Code(pthread_cond_wait(C(c), M(m)));
}
// C11's TIME_UTC deadline is CLOCK_REALTIME, a pthread condition's default.
int cnd_timedwait(cnd_t* c, mtx_t* m, const struct timespec* deadline) {
  using namespace delayd::brokers::c11_tsan;
  return Code(pthread_cond_timedwait(C(c), M(m), deadline));
}
void cnd_destroy(cnd_t* c) { pthread_cond_destroy(delayd::brokers::c11_tsan::C(c)); }

}  // extern "C"
#endif
