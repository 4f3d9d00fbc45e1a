#include "wheel/timing_wheel.h"

#include <bit>
#include <cassert>

namespace delayd::wheel {

TimingWheel::TimingWheel(uint64_t now) : now_(now) {}

void TimingWheel::Link(List& list, TimerNode* n, uint16_t where) {
  n->where_ = where;
  n->prev_ = list.head.prev_;
  n->next_ = &list.head;
  list.head.prev_->next_ = n;
  list.head.prev_ = n;
}

void TimingWheel::Unlink(TimerNode* n) {
  n->prev_->next_ = n->next_;
  n->next_->prev_ = n->prev_;
  n->prev_ = n->next_ = nullptr;
}

// Invariant kept by Place: a timer at level L has the same digits as now_
// above L, and a larger digit L; so it activates before now_ leaves the
// current span of level L + 1.
void TimingWheel::Place(TimerNode* n) {
  if (n->expiry_ <= now_) {
    Link(due_, n, kDueList);
    return;
  }
  const uint64_t diff = n->expiry_ ^ now_;
  const int level = (63 - std::countl_zero(diff)) / kBits;
  assert(level < kLevels);
  const int slot = static_cast<int>((n->expiry_ >> (kBits * level)) & (kSlots - 1));
  Link(slots_[level][slot], n, static_cast<uint16_t>(level * kSlots + slot));
  occupied_[level] |= uint64_t{1} << slot;
}

void TimingWheel::Schedule(TimerNode* n, uint64_t expiry) {
  assert(!n->scheduled());
  if (expiry > now_ + kMaxSpan) expiry = now_ + kMaxSpan;
  n->expiry_ = expiry;
  Place(n);
  ++size_;
}

void TimingWheel::Cancel(TimerNode* n) {
  if (!n->scheduled()) return;
  const uint16_t where = n->where_;
  Unlink(n);
  --size_;
  if (where != kDueList) {
    const int level = where / kSlots;
    const int slot = where % kSlots;
    if (slots_[level][slot].empty()) occupied_[level] &= ~(uint64_t{1} << slot);
  }
}

void TimingWheel::Cascade(int level, int slot) {
  List& list = slots_[level][slot];
  if (list.empty()) return;
  occupied_[level] &= ~(uint64_t{1} << slot);
  // Detach the whole list first: Place() may link into other lists.
  TimerNode* n = list.head.next_;
  list.head.prev_->next_ = nullptr;
  list.head.prev_ = list.head.next_ = &list.head;
  while (n != nullptr) {
    TimerNode* next = n->next_;
    n->prev_ = n->next_ = nullptr;
    Place(n);
    n = next;
  }
}

std::optional<uint64_t> TimingWheel::NextActivation() const {
  std::optional<uint64_t> best;
  for (int level = 0; level < kLevels; ++level) {
    if (occupied_[level] == 0) continue;
    const int shift = kBits * level;
    const int digit = static_cast<int>((now_ >> shift) & (kSlots - 1));
    const uint64_t later =
        digit == kSlots - 1 ? 0 : occupied_[level] & (~uint64_t{0} << (digit + 1));
    // By the invariant, an occupied slot is never at or below now_'s digit.
    assert((occupied_[level] & ~later) == 0);
    if (later == 0) continue;
    const int slot = std::countr_zero(later);
    const int upper = shift + kBits;
    const uint64_t base = upper >= 64 ? 0 : (now_ >> upper) << upper;
    const uint64_t t = base | (static_cast<uint64_t>(slot) << shift);
    if (!best || t < *best) best = t;
  }
  return best;
}

std::optional<uint64_t> TimingWheel::NextEvent() const {
  if (!due_.empty()) return now_;
  return NextActivation();
}

}  // namespace delayd::wheel
