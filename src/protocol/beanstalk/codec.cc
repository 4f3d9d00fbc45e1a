#include "protocol/beanstalk/codec.h"

#include <cerrno>
#include <cstdlib>
#include <limits>

namespace delayd::beanstalk {
namespace {

bool IsNameChar(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '+' || c == '/' || c == ';' || c == '.' || c == '$' || c == '_' || c == '(' ||
         c == ')';
}

// beanstalkd's read_uint: skip spaces, require a digit, parse base 10 within
// `max`. With `rest` null the whole input must be consumed; otherwise *rest
// gets what follows the number.
bool ReadUint(std::string_view in, uint64_t max, uint64_t* out, std::string_view* rest) {
  size_t i = 0;
  while (i < in.size() && in[i] == ' ') ++i;
  if (i == in.size() || in[i] < '0' || in[i] > '9') return false;
  uint64_t v = 0;
  for (; i < in.size() && in[i] >= '0' && in[i] <= '9'; ++i) {
    const uint64_t d = static_cast<uint64_t>(in[i] - '0');
    if (v > (std::numeric_limits<uint64_t>::max() - d) / 10) return false;
    v = v * 10 + d;
  }
  if (v > max) return false;
  if (rest == nullptr) {
    if (i != in.size()) return false;
  } else {
    *rest = in.substr(i);
  }
  *out = v;
  return true;
}

bool ReadU32(std::string_view in, uint32_t* out, std::string_view* rest) {
  uint64_t v = 0;
  if (!ReadUint(in, std::numeric_limits<uint32_t>::max(), &v, rest)) return false;
  *out = static_cast<uint32_t>(v);
  return true;
}

bool ReadU64(std::string_view in, uint64_t* out, std::string_view* rest) {
  return ReadUint(in, std::numeric_limits<uint64_t>::max(), out, rest);
}

bool ReadSeconds(std::string_view in, int64_t* out, std::string_view* rest) {
  uint32_t v = 0;
  if (!ReadU32(in, &v, rest)) return false;
  *out = v;
  return true;
}

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

Command Error(Op op, ParseError e, bool counted = false) {
  Command c;
  c.op = op;
  c.error = e;
  c.counted = counted;
  return c;
}

Command Ok(Op op) {
  Command c;
  c.op = op;
  c.counted = true;
  return c;
}

// Commands that take nothing after their name.
Command Bare(std::string_view line, std::string_view name, Op op) {
  return line.size() == name.size() ? Ok(op) : Error(op, ParseError::kBadFormat);
}

// Commands whose whole argument is one job id.
Command WithId(std::string_view arg, Op op) {
  Command c = Ok(op);
  if (!ReadU64(arg, &c.id, nullptr)) return Error(op, ParseError::kBadFormat);
  return c;
}

Command WithTube(std::string_view arg, Op op) {
  if (!IsValidTubeName(arg)) return Error(op, ParseError::kBadFormat);
  Command c = Ok(op);
  c.tube = std::string(arg);
  return c;
}

// C's strtol/strtoul on a NUL-free string: leading white space, a sign,
// digits, anything after. Returns false when no digits were found or the
// value overflows.
template <typename T>
bool CLenient(std::string_view arg, T* out, bool* any_digits) {
  std::string s(arg);
  char* end = nullptr;
  errno = 0;
  if constexpr (std::is_signed_v<T>) {
    *out = std::strtol(s.c_str(), &end, 10);
  } else {
    *out = std::strtoul(s.c_str(), &end, 10);
  }
  *any_digits = end != s.c_str();
  return errno == 0;
}

}  // namespace

bool IsValidTubeName(std::string_view name) {
  if (name.empty() || name.size() > kTubeNameMax || name[0] == '-') return false;
  for (char c : name) {
    if (!IsNameChar(c)) return false;
  }
  return true;
}

Command ParseCommand(std::string_view line) {
  // A NUL inside the line is refused before anything else.
  if (line.find('\0') != std::string_view::npos) return Error(Op::kUnknown, ParseError::kBadFormat);

  if (StartsWith(line, "put ")) {
    Command c = Ok(Op::kPut);
    std::string_view rest = line.substr(4);
    if (!ReadU32(rest, &c.priority, &rest) || !ReadSeconds(rest, &c.delay_s, &rest) ||
        !ReadSeconds(rest, &c.ttr_s, &rest) || !ReadU32(rest, &c.bytes, &rest)) {
      return Error(Op::kPut, ParseError::kBadFormat);
    }
    c.trailing_garbage = !rest.empty();
    if (c.ttr_s < 1) c.ttr_s = 1;
    return c;
  }
  if (StartsWith(line, "peek ")) return WithId(line.substr(5), Op::kPeek);
  if (StartsWith(line, "peek-ready")) return Bare(line, "peek-ready", Op::kPeekReady);
  if (StartsWith(line, "peek-delayed")) return Bare(line, "peek-delayed", Op::kPeekDelayed);
  if (StartsWith(line, "peek-buried")) return Bare(line, "peek-buried", Op::kPeekBuried);
  if (StartsWith(line, "reserve-with-timeout ")) {
    long timeout = 0;
    bool digits = false;
    if (!CLenient(line.substr(21), &timeout, &digits)) {
      return Error(Op::kReserveWithTimeout, ParseError::kBadFormat);
    }
    Command c = Ok(Op::kReserveWithTimeout);
    // beanstalkd keeps the timeout in an int; values past it wrap the same way.
    c.timeout_s = static_cast<int>(timeout);
    return c;
  }
  if (StartsWith(line, "reserve-job ")) return WithId(line.substr(12), Op::kReserveJob);
  if (StartsWith(line, "reserve")) return Bare(line, "reserve", Op::kReserve);
  if (StartsWith(line, "delete ")) return WithId(line.substr(7), Op::kDelete);
  if (StartsWith(line, "release ")) {
    Command c = Ok(Op::kRelease);
    std::string_view rest = line.substr(8);
    if (!ReadU64(rest, &c.id, &rest) || !ReadU32(rest, &c.priority, &rest) ||
        !ReadSeconds(rest, &c.delay_s, nullptr)) {
      return Error(Op::kRelease, ParseError::kBadFormat);
    }
    return c;
  }
  if (StartsWith(line, "bury ")) {
    Command c = Ok(Op::kBury);
    std::string_view rest = line.substr(5);
    if (!ReadU64(rest, &c.id, &rest) || !ReadU32(rest, &c.priority, nullptr)) {
      return Error(Op::kBury, ParseError::kBadFormat);
    }
    return c;
  }
  if (StartsWith(line, "kick ")) {
    unsigned long bound = 0;
    bool digits = false;
    if (!CLenient(line.substr(5), &bound, &digits) || !digits) {
      return Error(Op::kKick, ParseError::kBadFormat);
    }
    Command c = Ok(Op::kKick);
    c.bound = static_cast<uint32_t>(bound);  // beanstalkd's count is an unsigned int
    return c;
  }
  if (StartsWith(line, "kick-job ")) return WithId(line.substr(9), Op::kKickJob);
  if (StartsWith(line, "touch ")) return WithId(line.substr(6), Op::kTouch);
  if (StartsWith(line, "stats-job ")) return WithId(line.substr(10), Op::kStatsJob);
  if (StartsWith(line, "stats-tube ")) return WithTube(line.substr(11), Op::kStatsTube);
  if (StartsWith(line, "stats")) return Bare(line, "stats", Op::kStats);
  if (StartsWith(line, "use ")) return WithTube(line.substr(4), Op::kUse);
  if (StartsWith(line, "watch ")) return WithTube(line.substr(6), Op::kWatch);
  if (StartsWith(line, "ignore ")) return WithTube(line.substr(7), Op::kIgnore);
  if (StartsWith(line, "list-tubes-watched")) {
    return Bare(line, "list-tubes-watched", Op::kListTubesWatched);
  }
  if (StartsWith(line, "list-tube-used")) return Bare(line, "list-tube-used", Op::kListTubeUsed);
  if (StartsWith(line, "list-tubes")) return Bare(line, "list-tubes", Op::kListTubes);
  if (StartsWith(line, "quit")) return Ok(Op::kQuit);
  if (StartsWith(line, "pause-tube")) {
    std::string_view rest = line.substr(10);
    size_t start = 0;
    while (start < rest.size() && rest[start] == ' ') ++start;
    size_t end = start;
    while (end < rest.size() && IsNameChar(rest[end])) ++end;
    if (end == start) return Error(Op::kPauseTube, ParseError::kBadFormat);
    Command c = Ok(Op::kPauseTube);
    if (!ReadSeconds(rest.substr(end), &c.delay_s, nullptr)) {
      return Error(Op::kPauseTube, ParseError::kBadFormat);
    }
    c.tube = std::string(rest.substr(start, end - start));
    // Counted before the name is checked, as beanstalkd does.
    if (!IsValidTubeName(c.tube)) return Error(Op::kPauseTube, ParseError::kBadFormat, true);
    return c;
  }
  return Error(Op::kUnknown, ParseError::kUnknownCommand);
}

}  // namespace delayd::beanstalk
