// W3C Trace Context (https://www.w3.org/TR/trace-context/, Level 1): the
// `traceparent` and `tracestate` headers a submitter sends, kept with its
// job and sent on with each delivery attempt under a parent id of delayd's
// own. No tracing library is packaged in Debian 12; the format is small.
//
// The rules are the spec's: a traceparent that fails them is ignored (the
// spec's receiver restarts the trace; delayd, which records no spans, then
// sends none), and so is its tracestate; a tracestate that fails them, or
// has more than 32 members, is dropped alone.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace delayd {

struct TraceParent {
  std::string trace_id;   // 32 lowercase hex digits, not all zero
  std::string parent_id;  // 16 lowercase hex digits, not all zero
  uint8_t flags = 0;      // bit 0: sampled
};

// `header` (surrounding spaces and tabs ignored) read by the spec's rules:
// version 2 lowercase hex digits, not "ff"; version 00 exactly 55
// characters; a later version at least 55, its fields after the flags
// (a '-' first) skipped. Nothing for anything else.
std::optional<TraceParent> ParseTraceparent(std::string_view header);
// As sent: version 00, "00-<trace id>-<parent id>-<flags>".
std::string FormatTraceparent(const TraceParent& tp);

// `header` (the values of every tracestate header, joined with ',') as a
// list of at most 32 "key=value" members with unique keys, rewritten
// without the optional spaces and empty members; nothing when any member
// breaks the rules (keys lowercase, 256 characters at most, "tenant@system"
// allowed; values 1-256 printable characters without ',' or '=').
std::optional<std::string> ParseTracestate(std::string_view header);

// A random parent id for one outgoing request: 16 lowercase hex digits,
// never all zero.
std::string NewParentId();

}  // namespace delayd
