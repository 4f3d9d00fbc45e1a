// Reply words and bodies of the beanstalk protocol, byte for byte as
// beanstalkd 1.12 sends them.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "engine/stats.h"
#include "protocol/beanstalk/codec.h"

namespace delayd::beanstalk {

namespace reply {
inline constexpr std::string_view kNotFound = "NOT_FOUND\r\n";
inline constexpr std::string_view kDeleted = "DELETED\r\n";
inline constexpr std::string_view kReleased = "RELEASED\r\n";
inline constexpr std::string_view kBuried = "BURIED\r\n";
inline constexpr std::string_view kKicked = "KICKED\r\n";
inline constexpr std::string_view kTouched = "TOUCHED\r\n";
inline constexpr std::string_view kPaused = "PAUSED\r\n";
inline constexpr std::string_view kNotIgnored = "NOT_IGNORED\r\n";
inline constexpr std::string_view kDeadlineSoon = "DEADLINE_SOON\r\n";
inline constexpr std::string_view kTimedOut = "TIMED_OUT\r\n";
inline constexpr std::string_view kOutOfMemory = "OUT_OF_MEMORY\r\n";
inline constexpr std::string_view kInternalError = "INTERNAL_ERROR\r\n";
inline constexpr std::string_view kDraining = "DRAINING\r\n";
inline constexpr std::string_view kBadFormat = "BAD_FORMAT\r\n";
inline constexpr std::string_view kUnknownCommand = "UNKNOWN_COMMAND\r\n";
inline constexpr std::string_view kExpectedCrlf = "EXPECTED_CRLF\r\n";
inline constexpr std::string_view kJobTooBig = "JOB_TOO_BIG\r\n";
}  // namespace reply

// The one table from engine status to protocol reply: `ok` is the reply on
// success; NotFound is NOT_FOUND, draining is DRAINING, a full disk is
// OUT_OF_MEMORY and any other store failure INTERNAL_ERROR (the client may
// retry either).
std::string_view StatusReply(const Status& s, std::string_view ok);

// "<word> <id> <bytes>\r\n<body>\r\n", as FOUND and RESERVED.
std::string JobReply(std::string_view word, uint64_t id, const std::string& body);
// "OK <bytes>\r\n<yaml>\r\n".
std::string YamlReply(const std::string& yaml);
std::string TubeListYaml(const std::vector<std::string>& names);
std::string JobStatsYaml(const engine::JobStats& s);
std::string TubeStatsYaml(const engine::TubeStats& s);

// Server-wide figures of `stats` that the protocol layer keeps.
struct ServerCounters {
  std::array<uint64_t, static_cast<size_t>(Op::kCount)> ops{};
  uint32_t connections = 0;
  uint32_t producers = 0;  // connections that have sent a put
  uint32_t workers = 0;    // connections that have sent a reserve
  uint32_t total_connections = 0;
  uint64_t store_writes = 0;
};

struct ProcessInfo {
  std::string version;
  std::string instance_id;  // 16 hex digits, random per process
  std::string hostname, os, platform;
  int64_t started_us = 0;  // steady
  uint64_t max_job_size = 0;
};

std::string ServerStatsYaml(const engine::EngineStats& e, const ServerCounters& c,
                            const ProcessInfo& p, int64_t now_steady_us);

}  // namespace delayd::beanstalk
