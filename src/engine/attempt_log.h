// A job's delivery history: each push attempt as one JSON object in an array
// kept as text with the job (JobRecord::attempt_log). Written here and read
// back here, so its keys are named once.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace delayd::engine {

// What a delivery attempt came to.
enum class AttemptOutcome : uint8_t {
  kOk,     // the target accepted it: the job is finished
  kRetry,  // failed; the job is delayed by the retry policy's backoff
  kDead,   // failed for the last time: the job is buried as a dead letter
};
std::string_view OutcomeName(AttemptOutcome o);  // "ok", "retry", "dead"
std::optional<AttemptOutcome> ParseOutcome(std::string_view name);

struct Attempt {
  uint32_t number = 0;  // the reservation it ran under: 1 for the first delivery
  int64_t started_ms = 0;
  int64_t duration_ms = 0;
  AttemptOutcome outcome = AttemptOutcome::kOk;
  int http_status = 0;  // 0: no response
  std::string error;    // excerpt; empty on success
  // The parent id this attempt's traceparent carried (a job with a trace
  // context); empty otherwise.
  std::string parent_id = {};
};

// Appends `a` to `log`, then drops the oldest entries beyond `keep`. Entries
// already in the log stay the text they were written as.
void AppendAttempt(std::string& log, const Attempt& a, size_t keep);

// The attempts in `log`, oldest first. An empty or unreadable log has none.
std::vector<Attempt> ReadAttempts(std::string_view log);

}  // namespace delayd::engine
