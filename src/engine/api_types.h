// Values the engine exchanges with the HTTP API and the dispatcher: jobs as
// submitted, read, listed and patched, topics, and push leases.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/json_text.h"
#include "engine/attempt_log.h"
#include "engine/job_state.h"
#include "engine/spec.h"
#include "store/job_record.h"

namespace delayd::engine {

struct NewJob {
  std::string key;  // empty: none
  uint32_t priority = 1024;
  std::optional<int64_t> run_at_ms;  // wall ms; else due after delay_ms
  int64_t delay_ms = 0;
  int64_t ttr_ms = 0;  // 0: the topic's, else EngineOptions::default_ttr_ms
  std::string body;
  JobSpec spec;  // without target or retry, the topic's defaults apply
};

struct Submitted {
  uint64_t id = 0;
  bool duplicate = false;  // the key was taken: `id` is the existing job
};

// A job as read: its stored fields as memory knows them, and its state
// (ready, delayed, reserved, buried or done).
struct JobInfo {
  store::JobRecord record;
  std::shared_ptr<const JobSpec> spec;  // record.spec decoded; null for a plain job
  JobState state = JobState::kReady;
  uint32_t lease = 0;          // reserved: the reservation's number (its attempt)
  int64_t lease_until_ms = 0;  // reserved: wall ms when it runs out
  bool pushing = false;        // reserved by the dispatcher
};

// A change to a job that is not reserved. Unset fields stay as they are.
struct JobPatch {
  std::optional<uint32_t> priority;
  std::optional<int64_t> due_ms;
  std::optional<int64_t> ttr_ms;
  std::optional<std::string> body;
  std::optional<BodyEncoding> encoding;
  std::optional<std::optional<Target>> target;  // set to nullopt: remove the target
  std::optional<std::optional<RetryPolicy>> retry;
};

struct ListFilter {
  std::optional<std::string> topic;
  std::optional<JobState> state;  // one of JobInfo's states
  std::string key_prefix;
  std::optional<int64_t> due_after_ms;
  std::optional<int64_t> due_before_ms;
  std::string error_contains;  // in last_error; empty: any
  // A field of the body. The store cannot test it: the engine reads the jobs
  // the other fields select, up to kBodyScanBytes per page, and tests each.
  std::optional<JsonFieldTest> body;
  uint64_t after_id = 0;  // the cursor
  size_t limit = 100;
};

// How much one page of a body search reads: each job counts its body's bytes
// and kBodyScanRowBytes more (65,536 jobs of small bodies, 255 of 64 KiB). A
// page may then hold fewer jobs than its limit, even none; its cursor goes
// on from the last job read.
inline constexpr size_t kBodyScanBytes = 16 << 20;
inline constexpr size_t kBodyScanRowBytes = 256;

// The due forecast: delayed jobs per bucket from `from_ms` (the start of the
// current minute, or hour for buckets of whole hours).
struct Forecast {
  int64_t from_ms = 0;
  std::vector<uint64_t> counts;
};

struct ListPage {
  std::vector<JobInfo> jobs;
  uint64_t next_cursor = 0;  // 0: no more
};

struct TopicInfo {
  std::string name;
  uint64_t ready = 0, delayed = 0, reserved = 0, buried = 0;
  uint64_t total_jobs = 0;
  bool paused = false;
  int64_t pause_left_ms = 0;
  int64_t oldest_ready_due_ms = 0;  // due time of the longest-waiting ready job; 0: none
  std::shared_ptr<const TopicSettings> settings;
};

// A due push job handed to the dispatcher, reserved until it reports back.
struct PushLease {
  uint64_t id = 0;
  uint32_t attempt = 0;  // 1 for the first delivery
  std::string topic;
  int64_t due_ms = 0;
  int64_t run_at_ms = 0;  // as asked: a timer job's fire time
  int64_t created_ms = 0;
  std::string key;  // empty: none
  std::shared_ptr<const std::string> body;
  std::shared_ptr<const JobSpec> spec;
};

}  // namespace delayd::engine
