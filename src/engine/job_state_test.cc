#include "engine/job_state.h"

#include <gtest/gtest.h>

namespace delayd::engine {
namespace {

TEST(JobStateTest, EveryStateAClientSeesRoundTripsThroughItsName) {
  for (JobState s : {JobState::kReady, JobState::kDelayed, JobState::kReserved, JobState::kBuried,
                     JobState::kDone}) {
    EXPECT_EQ(ParseState(StateName(s)), s) << StateName(s);
    EXPECT_TRUE(Visible(s));
  }
}

TEST(JobStateTest, InternalStatesAreNeitherVisibleNorNameable) {
  for (JobState s : {JobState::kPending, JobState::kDeleting}) {
    EXPECT_FALSE(Visible(s));
    EXPECT_EQ(ParseState(StateName(s)), std::nullopt) << StateName(s);
  }
  EXPECT_EQ(ParseState("Ready"), std::nullopt);
  EXPECT_EQ(ParseState(""), std::nullopt);
}

TEST(JobStateTest, AReservationIsStoredAsReady) {
  EXPECT_EQ(ToStored(JobState::kReserved), store::StoredState::kReady);
  for (store::StoredState s : {store::StoredState::kReady, store::StoredState::kDelayed,
                               store::StoredState::kBuried, store::StoredState::kDone}) {
    EXPECT_EQ(ToStored(FromStored(s)), s);
  }
}

}  // namespace
}  // namespace delayd::engine
