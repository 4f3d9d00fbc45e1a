// What the load tools of bench/ share: their arguments, the machine's CPU
// steal, and the lateness of deliveries (arrival minus due time).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

namespace delayd::bench {

// A delivery as a receiver saw it.
struct Hit {
  int64_t at_us;   // wall clock at receipt
  int64_t due_ms;  // the job's due time, as delayd sent it
};

// "--name VALUE" among the arguments after the mode.
inline const char* ArgText(int argc, char** argv, const char* name) {
  for (int i = 2; i + 1 < argc; ++i) {
    if (strcmp(argv[i], name) == 0) return argv[i + 1];
  }
  return nullptr;
}

inline long Arg(int argc, char** argv, const char* name, long dflt) {
  const char* text = ArgText(argc, argv, name);
  return text ? atol(text) : dflt;
}

// The machine's CPU steal (time the hypervisor gave to other guests) as
// {steal, total} jiffies; on a shared VM it explains outliers.
inline std::pair<long long, long long> CpuSteal() {
  long long v[8] = {0};
  if (FILE* f = fopen("/proc/stat", "r")) {
    if (fscanf(f, "cpu %lld %lld %lld %lld %lld %lld %lld %lld", &v[0], &v[1], &v[2], &v[3], &v[4],
               &v[5], &v[6], &v[7]) != 8) {
      v[7] = 0;
    }
    fclose(f);
  }
  long long total = 0;
  for (long long x : v) total += x;
  return {v[7], total};
}

inline double StealPct(std::pair<long long, long long> a, std::pair<long long, long long> b) {
  return b.second > a.second
             ? 100.0 * (b.first - a.first) / static_cast<double>(b.second - a.second)
             : 0;
}

struct Lateness {
  double p50_ms = 0, p99_ms = 0, max_ms = 0;
  long early = 0;
  double span_s = 0;  // first to last arrival
};

// Lateness (arrival minus due time) of `hits`.
inline Lateness Measure(const std::vector<Hit>& hits) {
  std::vector<int64_t> late;
  int64_t first_us = INT64_MAX, last_us = 0;
  for (const Hit& h : hits) {
    late.push_back(h.at_us - h.due_ms * 1000);
    first_us = std::min(first_us, h.at_us);
    last_us = std::max(last_us, h.at_us);
  }
  Lateness l;
  if (late.empty()) return l;
  std::sort(late.begin(), late.end());
  l.p50_ms = late[late.size() / 2] / 1000.0;
  l.p99_ms = late[late.size() * 99 / 100] / 1000.0;
  l.max_ms = late.back() / 1000.0;
  l.early =
      static_cast<long>(std::count_if(late.begin(), late.end(), [](int64_t x) { return x < 0; }));
  l.span_s = (last_us - first_us) / 1e6;
  return l;
}

// The result line of a delivery run (http_load deliver, broker_load).
inline void PrintDelivery(long jobs, double submit_rate, const Lateness& l, double steal_pct) {
  printf(
      "deliver jobs=%ld submit_per_s=%.0f deliveries_per_s=%.0f (over %.2f s) lateness_ms "
      "p50=%.2f p99=%.2f max=%.2f early=%ld cpu_steal=%.1f%%\n",
      jobs, submit_rate, (jobs - 1) / l.span_s, l.span_s, l.p50_ms, l.p99_ms, l.max_ms, l.early,
      steal_pct);
}

// Waits from `due_ms` (wall clock) until `count()` reaches `jobs`, at most
// 120 s; returns the CPU steal meanwhile in %, or -1 (having said why) when
// submitting ran past `due_ms` or the jobs did not all arrive.
template <class Count>
double WaitForDeliveries(Count count, long jobs, int64_t due_ms) {
  using namespace std::chrono;
  if (duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count() > due_ms) {
    fprintf(stderr, "submitting took longer than --lead-ms; raise it\n");
    return -1;
  }
  // Steal is measured over the delivery window: from the first due time on.
  std::this_thread::sleep_until(system_clock::time_point(milliseconds(due_ms)));
  const auto steal0 = CpuSteal();
  const auto deadline = steady_clock::now() + seconds(120);
  while (static_cast<long>(count()) < jobs) {
    if (steady_clock::now() > deadline) {
      fprintf(stderr, "only %zu of %ld delivered in 120 s\n", static_cast<size_t>(count()), jobs);
      return -1;
    }
    std::this_thread::sleep_for(milliseconds(10));
  }
  return StealPct(steal0, CpuSteal());
}

}  // namespace delayd::bench
