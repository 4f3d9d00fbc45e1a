// A hierarchical timing wheel with integer ticks (delayd's engine uses 1 tick = 100 us).
//
// Eight levels of 64 slots cover 2^48 ticks (about 890 years of 100 us ticks). A timer
// lives at the level of the highest 6-bit digit in which its expiry differs
// from the wheel's current tick, in the slot named by that digit of its
// expiry. When the current tick reaches the start of that slot, the slot is
// cascaded: its timers are placed again, now at a lower level, until they are
// due. One bitmap per level finds the next occupied slot with one instruction,
// so Advance() jumps straight from event to event however far time moves and
// NextEvent() lets the owner sleep until exactly the next tick that matters.
//
// Timers are intrusive (TimerNode is embedded in its owner), so scheduling
// and cancelling allocate nothing and cost O(1).
//
// Not thread-safe: one owner thread drives it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>

namespace delayd::wheel {

class TimingWheel;

// Embed one in each object that needs a timer. A node is in at most one wheel.
struct TimerNode {
  bool scheduled() const { return next_ != nullptr; }
  uint64_t expiry() const { return expiry_; }

 private:
  friend class TimingWheel;
  TimerNode* prev_ = nullptr;
  TimerNode* next_ = nullptr;
  uint64_t expiry_ = 0;
  uint16_t where_ = 0;  // level * 64 + slot, or kDueList
};

class TimingWheel {
 public:
  static constexpr int kBits = 6;
  static constexpr int kSlots = 1 << kBits;
  static constexpr int kLevels = 8;
  // Expiries farther than this from now are clamped to it.
  static constexpr uint64_t kMaxSpan = uint64_t{1} << (kBits * kLevels - 1);

  explicit TimingWheel(uint64_t now = 0);
  TimingWheel(const TimingWheel&) = delete;
  TimingWheel& operator=(const TimingWheel&) = delete;

  uint64_t now() const { return now_; }
  size_t size() const { return size_; }

  // Schedules `n` to fire at tick `expiry`. An expiry at or before now() fires
  // on the next Advance(). REQUIRES: !n->scheduled().
  void Schedule(TimerNode* n, uint64_t expiry);
  // Removes `n` if scheduled; a no-op otherwise.
  void Cancel(TimerNode* n);

  // The first tick at which Advance() has work to do (fire or cascade), or
  // nullopt when the wheel is empty. Never earlier than now().
  std::optional<uint64_t> NextEvent() const;

  // Moves time forward to `to` (a `to` in the past is ignored), calling
  // fire(TimerNode*) for every timer whose expiry is <= `to`, in expiry order.
  // The callback may schedule or cancel timers, including the one it got
  // (which is already unscheduled when it is called). Returns how many fired.
  template <typename Fire>
  size_t Advance(uint64_t to, Fire&& fire);

 private:
  static constexpr uint16_t kDueList = kLevels * kSlots;

  struct List {
    TimerNode head;
    List() { head.prev_ = head.next_ = &head; }
    bool empty() const { return head.next_ == &head; }
  };

  void Place(TimerNode* n);
  void Link(List& list, TimerNode* n, uint16_t where);
  static void Unlink(TimerNode* n);
  std::optional<uint64_t> NextActivation() const;
  void Cascade(int level, int slot);

  uint64_t now_;
  size_t size_ = 0;
  std::array<uint64_t, kLevels> occupied_{};  // bit s set: slot s of that level is non-empty
  std::array<std::array<List, kSlots>, kLevels> slots_;
  List due_;  // expiry <= now_, waiting to be fired
};

template <typename Fire>
size_t TimingWheel::Advance(uint64_t to, Fire&& fire) {
  size_t fired = 0;
  auto drain_due = [&] {
    while (!due_.empty()) {
      TimerNode* n = due_.head.next_;
      Unlink(n);
      --size_;
      ++fired;
      fire(n);
    }
  };
  drain_due();
  for (;;) {
    std::optional<uint64_t> t = NextActivation();
    if (!t || *t > to) break;
    now_ = *t;
    // Higher levels first: their timers cascade into lower levels and may
    // land in a slot that activates at this same tick.
    for (int level = kLevels - 1; level >= 0; --level) {
      const uint64_t low_mask = (uint64_t{1} << (kBits * level)) - 1;
      if ((now_ & low_mask) != 0) continue;
      Cascade(level, static_cast<int>((now_ >> (kBits * level)) & (kSlots - 1)));
    }
    drain_due();
  }
  if (to > now_) now_ = to;
  return fired;
}

}  // namespace delayd::wheel
