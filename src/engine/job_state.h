// A job's states, with the one table of their names: what stats-job, the
// HTTP API and list filters say, and how each maps to the stored state.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "store/job_record.h"

namespace delayd::engine {

enum class JobState : uint8_t {
  kPending,  // put received, not yet durable: invisible to everyone
  kReady,
  kDelayed,
  kReserved,
  kBuried,
  kDone,      // finished, kept as a record for its retention: only in the store
  kDeleting,  // deleted, delete not yet answered: a tombstone the loader must skip
};

// "ready", "delayed", "reserved", "buried", "done"; "pending" and "deleting"
// for the two states no client sees.
std::string_view StateName(JobState s);
// The states a client may name; nullopt for anything else.
std::optional<JobState> ParseState(std::string_view name);
// A client may see the job in this state.
constexpr bool Visible(JobState s) { return s != JobState::kPending && s != JobState::kDeleting; }

// How a state is stored: a reservation is not, so a reserved job is stored
// as ready (and is ready again after a restart).
store::StoredState ToStored(JobState s);
JobState FromStored(store::StoredState s);

}  // namespace delayd::engine
