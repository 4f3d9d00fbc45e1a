// Test support: what push tests of every target kind check after a kill -9
// with deliveries in flight (at least once, and no more than that).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <vector>

namespace delayd::testing {

// `seen`: how many times the receiver got each job. Every job in `ids`
// landed, and only those not yet done at the kill (all but `done_before`)
// may have landed twice; the kill came with some in flight.
inline void ExpectAtLeastOnceAndDuplicatesOnlyInFlight(const std::map<uint64_t, int>& seen,
                                                       const std::vector<uint64_t>& ids,
                                                       size_t done_before) {
  size_t twice = 0;
  for (uint64_t id : ids) {
    auto it = seen.find(id);
    EXPECT_TRUE(it != seen.end() && it->second >= 1) << "job " << id << " was lost";
    twice += it != seen.end() && it->second > 1;
  }
  EXPECT_LE(twice, ids.size() - done_before) << "only jobs not done at the kill land twice";
  EXPECT_LT(done_before, ids.size()) << "the kill came with deliveries in flight";
}

}  // namespace delayd::testing
