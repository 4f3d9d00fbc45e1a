// Snapshots the engine hands out for stats, stats-tube and stats-job.
// Times are whole seconds, as beanstalkd reports them.
#pragma once

#include <cstdint>
#include <string>

#include "engine/job_state.h"
#include "store/job_record.h"

namespace delayd::engine {

struct JobStats {
  uint64_t id = 0;
  std::string tube;
  JobState state = JobState::kReady;  // ready, delayed, reserved or buried
  uint32_t priority = 0;
  int64_t age_s = 0;
  int64_t delay_s = 0;
  int64_t ttr_s = 0;
  int64_t time_left_s = 0;
  store::JobCounters counters;
};

struct TubeStats {
  std::string name;
  uint64_t urgent = 0, ready = 0, reserved = 0, delayed = 0, buried = 0;
  uint64_t total_jobs = 0;
  uint32_t using_count = 0, watching_count = 0;
  uint64_t waiting = 0;
  uint64_t deletes = 0, pauses = 0;
  int64_t pause_s = 0, pause_left_s = 0;
};

struct EngineStats {
  uint64_t urgent = 0, ready = 0, reserved = 0, delayed = 0, buried = 0;
  uint64_t total_jobs = 0;
  uint64_t job_timeouts = 0;
  uint64_t tubes = 0;
  uint64_t waiting = 0;
  bool draining = false;
  // Stored rows left out of memory because they break what the engine
  // relies on (store::RecordFault, or an id already taken): they stay in
  // the store as they are, for an operator to look at.
  uint64_t unsound_rows = 0;
};

}  // namespace delayd::engine
