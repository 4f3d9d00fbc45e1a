#include "engine/job_state.h"

#include <array>

namespace delayd::engine {

namespace {
struct Named {
  JobState state;
  std::string_view name;
  bool client_visible;
};
constexpr std::array<Named, 7> kStates = {{
    {JobState::kPending, "pending", false},
    {JobState::kReady, "ready", true},
    {JobState::kDelayed, "delayed", true},
    {JobState::kReserved, "reserved", true},
    {JobState::kBuried, "buried", true},
    {JobState::kDone, "done", true},
    {JobState::kDeleting, "deleting", false},
}};
}  // namespace

std::string_view StateName(JobState s) { return kStates[static_cast<size_t>(s)].name; }

std::optional<JobState> ParseState(std::string_view name) {
  for (const Named& n : kStates) {
    if (n.client_visible && n.name == name) return n.state;
  }
  return std::nullopt;
}

store::StoredState ToStored(JobState s) {
  switch (s) {
    case JobState::kDelayed:
      return store::StoredState::kDelayed;
    case JobState::kBuried:
      return store::StoredState::kBuried;
    case JobState::kDone:
      return store::StoredState::kDone;
    default:
      return store::StoredState::kReady;
  }
}

JobState FromStored(store::StoredState s) {
  switch (s) {
    case store::StoredState::kDelayed:
      return JobState::kDelayed;
    case store::StoredState::kBuried:
      return JobState::kBuried;
    case store::StoredState::kDone:
      return JobState::kDone;
    case store::StoredState::kReserved:  // by a node of a cluster
      return JobState::kReserved;
    case store::StoredState::kReady:
      break;
  }
  return JobState::kReady;
}

}  // namespace delayd::engine
