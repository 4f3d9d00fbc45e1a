// The last few values made from text keys, for a parse that most calls
// repeat: the jobs of a burst share their topic's spec (engine/spec_codec.h)
// and their Kafka target's URL (brokers/kafka_sender.h), so each is parsed
// once while it is held rather than once a job. Bounded by N keys, the
// oldest replaced first; compared by text, so N should be small (a miss
// costs N string comparisons beside a parse). Not thread-safe.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace delayd {

template <typename Value, size_t N>
class RecentCache {
  static_assert(N > 0);

 public:
  static constexpr size_t kEntries = N;

  RecentCache() { entries_.reserve(N); }

  // The value held for `key`, or make(key) kept and returned. The reference
  // holds until the next call.
  template <typename Make>
  const Value& Get(std::string_view key, Make&& make) {
    for (const Entry& e : entries_) {
      if (e.key == key) return e.value;
    }
    Entry fresh{std::string(key), std::forward<Make>(make)(key)};
    if (entries_.size() < N) return entries_.emplace_back(std::move(fresh)).value;
    Entry& slot = entries_[next_];
    slot = std::move(fresh);
    next_ = (next_ + 1) % N;
    return slot.value;
  }

 private:
  struct Entry {
    std::string key;
    Value value;
  };
  std::vector<Entry> entries_;  // at most N, reserved: never reallocated
  size_t next_ = 0;             // the entry a miss replaces once full
};

}  // namespace delayd
