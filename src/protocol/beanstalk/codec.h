// The beanstalk protocol codec: pure functions from a command line to a
// Command. No I/O and no state, so every rule is unit-tested on its own.
//
// The rules are beanstalkd 1.12's, quirks included, because existing clients
// depend on the exact replies: commands match by prefix in a fixed order,
// numbers are unsigned decimals after optional spaces, `reserve-with-timeout`
// and `kick` use C's lenient strtol/strtoul, and a tube name is 1 to 200
// characters of [A-Za-z0-9-+/;.$_()] not starting with '-'.
// See doc/beanstalk-protocol.md for the list.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace delayd::beanstalk {

// The commands, in beanstalkd's op order (stats counts them per op).
enum class Op : uint8_t {
  kUnknown,
  kPut,
  kPeek,
  kReserve,
  kDelete,
  kRelease,
  kBury,
  kKick,
  kStats,
  kStatsJob,
  kPeekBuried,
  kUse,
  kWatch,
  kIgnore,
  kListTubes,
  kListTubeUsed,
  kListTubesWatched,
  kStatsTube,
  kPeekReady,
  kPeekDelayed,
  kReserveWithTimeout,
  kTouch,
  kQuit,
  kPauseTube,
  kKickJob,
  kReserveJob,
  kCount,  // number of ops
};

enum class ParseError : uint8_t { kNone, kBadFormat, kUnknownCommand };

// The longest command line, CRLF included; a longer line is BAD_FORMAT.
constexpr size_t kLineMax = 224;
constexpr size_t kTubeNameMax = 200;

struct Command {
  Op op = Op::kUnknown;
  ParseError error = ParseError::kNone;
  // beanstalkd counts some commands in stats before all checks pass (a put
  // whose size is too big or has trailing garbage, a pause-tube with a name
  // starting with '-'): true when this command counts.
  bool counted = false;

  uint32_t priority = 0;
  int64_t delay_s = 0;            // put, release, pause-tube
  int64_t ttr_s = 0;              // put (0 becomes 1, as in beanstalkd)
  uint32_t bytes = 0;             // put: body length announced
  bool trailing_garbage = false;  // put: checked after the size limit
  uint64_t id = 0;
  int64_t timeout_s = -1;  // reserve-with-timeout; negative waits forever
  uint32_t bound = 0;      // kick
  std::string tube;        // use, watch, ignore, stats-tube, pause-tube
};

// Parses one command line, without its CRLF.
Command ParseCommand(std::string_view line);

// True when `name` is a valid tube name.
bool IsValidTubeName(std::string_view name);

}  // namespace delayd::beanstalk
