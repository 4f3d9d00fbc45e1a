#include "wheel/timing_wheel.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <random>
#include <vector>

namespace delayd::wheel {
namespace {

struct Timer {
  explicit Timer(int i = 0) : id(i) {}
  TimerNode node;
  int id;
};

Timer* Owner(TimerNode* n) { return reinterpret_cast<Timer*>(n); }

// Advances and returns (tick at fire time, expiry, id) of each fired timer.
struct Fired {
  uint64_t expiry;
  int id;
};
std::vector<Fired> AdvanceTo(TimingWheel& w, uint64_t to) {
  std::vector<Fired> out;
  w.Advance(to, [&](TimerNode* n) { out.push_back({n->expiry(), Owner(n)->id}); });
  return out;
}

TEST(TimingWheelTest, FiresAtExpiryAndNotBefore) {
  TimingWheel w(1000);
  Timer t(1);
  w.Schedule(&t.node, 1005);
  EXPECT_EQ(w.NextEvent(), 1005u);
  EXPECT_TRUE(AdvanceTo(w, 1004).empty());
  auto fired = AdvanceTo(w, 1005);
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_EQ(fired[0].id, 1);
  EXPECT_FALSE(t.node.scheduled());
  EXPECT_EQ(w.size(), 0u);
  EXPECT_FALSE(w.NextEvent().has_value());
}

TEST(TimingWheelTest, CascadesThroughEveryLevel) {
  TimingWheel w(0);
  // One timer per level: 64^k + 1 ticks away, so each must cascade k times.
  std::vector<std::unique_ptr<Timer>> timers;
  for (int level = 0; level < 5; ++level) {
    auto t = std::make_unique<Timer>();
    t->id = level;
    w.Schedule(&t->node, (uint64_t{1} << (6 * level)) + 1);
    timers.push_back(std::move(t));
  }
  // Advancing to one tick before each expiry fires nothing new.
  std::vector<int> order;
  for (int level = 0; level < 5; ++level) {
    uint64_t expiry = (uint64_t{1} << (6 * level)) + 1;
    for (auto& f : AdvanceTo(w, expiry - 1)) order.push_back(-1 - f.id);
    auto fired = AdvanceTo(w, expiry);
    ASSERT_EQ(fired.size(), 1u) << "level " << level;
    EXPECT_EQ(fired[0].id, level);
    EXPECT_EQ(w.now(), expiry);
  }
  EXPECT_TRUE(order.empty());
}

TEST(TimingWheelTest, FiresAfterWraparoundOfLowerLevels) {
  // Start just before a level-2 boundary so expiries straddle it.
  const uint64_t start = 64 * 64 - 3;
  TimingWheel w(start);
  Timer a(1), b(2), c(3);
  w.Schedule(&a.node, start + 2);   // before the boundary
  w.Schedule(&b.node, start + 3);   // exactly on it
  w.Schedule(&c.node, start + 70);  // past it, crossing a level-1 wrap too
  auto fired = AdvanceTo(w, start + 100);
  ASSERT_EQ(fired.size(), 3u);
  EXPECT_EQ(fired[0].id, 1);
  EXPECT_EQ(fired[1].id, 2);
  EXPECT_EQ(fired[2].id, 3);
  EXPECT_EQ(fired[2].expiry, start + 70);
}

TEST(TimingWheelTest, CancelledTimerNeverFires) {
  TimingWheel w(0);
  Timer a(1), b(2);
  w.Schedule(&a.node, 5000);
  w.Schedule(&b.node, 5000);
  w.Cancel(&a.node);
  EXPECT_FALSE(a.node.scheduled());
  w.Cancel(&a.node);  // a second cancel is harmless
  auto fired = AdvanceTo(w, 10000);
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_EQ(fired[0].id, 2);
}

TEST(TimingWheelTest, CancelEmptiesSlotSoNextEventMovesOn) {
  TimingWheel w(0);
  Timer a(1), b(2);
  w.Schedule(&a.node, 10);
  w.Schedule(&b.node, 20);
  w.Cancel(&a.node);
  EXPECT_EQ(w.NextEvent(), 20u);
}

TEST(TimingWheelTest, ExpiryInThePastFiresOnNextAdvance) {
  TimingWheel w(500);
  Timer a(1);
  w.Schedule(&a.node, 100);
  EXPECT_EQ(w.NextEvent(), 500u);
  auto fired = AdvanceTo(w, 500);
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_EQ(w.now(), 500u);
}

TEST(TimingWheelTest, CallbackMayRescheduleItsOwnTimer) {
  TimingWheel w(0);
  Timer a(1);
  w.Schedule(&a.node, 10);
  int count = 0;
  w.Advance(100, [&](TimerNode* n) {
    ++count;
    if (count < 5) w.Schedule(n, n->expiry() + 10);
  });
  EXPECT_EQ(count, 5);
  EXPECT_FALSE(a.node.scheduled());
}

TEST(TimingWheelTest, HugeExpiryIsClampedNotLost) {
  TimingWheel w(0);
  Timer a(1);
  w.Schedule(&a.node, ~uint64_t{0});
  EXPECT_EQ(a.node.expiry(), TimingWheel::kMaxSpan);
  auto fired = AdvanceTo(w, TimingWheel::kMaxSpan);
  EXPECT_EQ(fired.size(), 1u);
}

// Random schedules, cancels and advances, checked against an ordered map.
TEST(TimingWheelTest, MatchesReferenceModelUnderRandomOperations) {
  std::mt19937_64 rng(42);
  TimingWheel w(123456);
  std::vector<std::unique_ptr<Timer>> timers;
  std::multimap<uint64_t, int> model;  // expiry -> id
  for (int i = 0; i < 4000; ++i) {
    auto t = std::make_unique<Timer>();
    t->id = i;
    timers.push_back(std::move(t));
  }
  int next = 0;
  for (int step = 0; step < 3000; ++step) {
    int op = static_cast<int>(rng() % 10);
    if (op < 5 && next < static_cast<int>(timers.size())) {
      // Mix of near, mid and far expiries, some in the past.
      uint64_t span = uint64_t{1} << (rng() % 30);
      uint64_t expiry = w.now() - 5 + rng() % span;
      w.Schedule(&timers[next]->node, expiry);
      model.emplace(std::max(expiry, w.now()), next);
      ++next;
    } else if (op < 7 && next > 0) {
      int victim = static_cast<int>(rng() % next);
      if (timers[victim]->node.scheduled()) {
        for (auto it = model.begin(); it != model.end(); ++it) {
          if (it->second == victim) {
            model.erase(it);
            break;
          }
        }
        w.Cancel(&timers[victim]->node);
      }
    } else {
      uint64_t to = w.now() + (rng() % 2 ? rng() % 100 : rng() % (uint64_t{1} << 24));
      auto fired = AdvanceTo(w, to);
      std::vector<int> expected;
      while (!model.empty() && model.begin()->first <= to) {
        expected.push_back(model.begin()->second);
        model.erase(model.begin());
      }
      ASSERT_EQ(fired.size(), expected.size()) << "step " << step;
      // Same set, and expiries never go backwards.
      std::multiset<int> a, b(expected.begin(), expected.end());
      uint64_t last = 0;
      for (auto& f : fired) {
        a.insert(f.id);
        EXPECT_GE(std::max(f.expiry, last), last);
        last = std::max(f.expiry, last);
      }
      EXPECT_EQ(a, b) << "step " << step;
      EXPECT_EQ(w.size(), model.size());
    }
  }
}

}  // namespace
}  // namespace delayd::wheel
