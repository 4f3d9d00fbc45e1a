// StaleReads: which rows of a read aside (Store::ReadAside) may be older
// than a change made while the read was in flight.
//
// The engine and the timer service change memory at once and the store a
// little later, and their reads aside are answered later still: a row that
// comes back may predate a change made meanwhile. Each read takes a mark
// when it starts (Begin); each change of a record is noted (Changed) while
// any read is in flight; the answer asks whether a row's record changed
// since its mark (ChangedSince) and reads it again if so. Notes older than
// the oldest read in flight are dropped, so memory stays bounded by what
// changes during reads.
//
// Threading: one thread (the event loop).
#pragma once

#include <cstdint>
#include <deque>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "store/store.h"

namespace delayd::store {

class StaleReads {
 public:
  // A read starts: its mark.
  uint64_t Begin() {
    reads_.insert(seq_);
    return seq_;
  }
  // The read marked `since` was answered and its answer used.
  void End(uint64_t since) {
    reads_.erase(reads_.find(since));
    const uint64_t oldest = reads_.empty() ? seq_ : *reads_.begin();
    while (!log_.empty() && log_.front().first <= oldest) {
      auto [seq, id] = log_.front();
      log_.pop_front();
      auto it = last_.find(id);
      if (it != last_.end() && it->second == seq) last_.erase(it);
    }
  }
  // Record `id` changed now.
  void Changed(uint64_t id) {
    if (reads_.empty()) return;  // no read can have seen it before
    log_.emplace_back(++seq_, id);
    last_[id] = seq_;
  }
  bool ChangedSince(uint64_t id, uint64_t since) const {
    auto it = last_.find(id);
    return it != last_.end() && it->second > since;
  }
  // Every record changed since `since`.
  std::vector<uint64_t> ChangedIdsSince(uint64_t since) const {
    std::vector<uint64_t> out;
    for (const auto& [id, seq] : last_) {
      if (seq > since) out.push_back(id);
    }
    return out;
  }

 private:
  uint64_t seq_ = 0;
  std::multiset<uint64_t> reads_;                  // the mark of each read in flight
  std::deque<std::pair<uint64_t, uint64_t>> log_;  // (seq, id), seq rising
  std::unordered_map<uint64_t, uint64_t> last_;    // id -> seq of its latest change
};

// ReadAsync (store.h) with a mark: `then(result, since)` gets what `read`
// returned and the mark to ask `log` about; the read ends after `then`.
// `read` runs where the store reads aside and must touch nothing else.
template <class Read, class Then>
void ReadAsyncMarked(Store& store, StaleReads& log, Read read, Then then) {
  const uint64_t since = log.Begin();
  ReadAsync(store, std::move(read), [&log, since, then = std::move(then)](auto result) mutable {
    then(std::move(result), since);
    log.End(since);
  });
}

}  // namespace delayd::store
