// Test support: a ClientObserver that records how each blocked reserve of
// its client ended, as lines a test can compare ("reserved ID BODY",
// "timed-out", "deadline-soon").
#pragma once

#include <string>
#include <vector>

#include "engine/types.h"

namespace delayd::engine::testing {

struct Recorder : ClientObserver {
  std::vector<std::string> events;
  void OnReserved(const JobView& j) override {
    events.push_back("reserved " + std::to_string(j.id) + " " + *j.body);
  }
  void OnReserveTimedOut() override { events.push_back("timed-out"); }
  void OnDeadlineSoon() override { events.push_back("deadline-soon"); }
  void OnReadsAnswered() override { ++reads_answered; }
  int reads_answered = 0;
  // The oldest event not yet taken; "" when none.
  std::string Take() {
    if (events.empty()) return "";
    std::string e = events.front();
    events.erase(events.begin());
    return e;
  }
};

}  // namespace delayd::engine::testing
