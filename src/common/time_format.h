// Text forms of times and durations used by the HTTP API.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace delayd {

// "2026-11-22T09:30:00.125Z": UTC, always with milliseconds.
std::string FormatRfc3339Ms(int64_t wall_ms);
void AppendRfc3339Ms(std::string& out, int64_t wall_ms);

// The range of every time delayd accepts: from the epoch to the last
// millisecond RFC 3339 can write, 9999-12-31T23:59:59.999Z.
inline constexpr int64_t kMaxTimeMs = 253'402'300'799'999;

// Parses RFC 3339 date-times ("2026-11-22T09:30:00Z", "...T17:30:00.5+08:00");
// lowercase t/z and a space separator are accepted as RFC 3339 allows.
// Returns wall ms since the epoch, or nullopt when malformed or outside
// [0, kMaxTimeMs].
std::optional<int64_t> ParseRfc3339(std::string_view text);

// Parses a duration such as "30m", "1h30m", "250ms", "2d", "1.5s" into ms
// (a fraction rounds to the nearest ms). Units: ms, s, m, h, d. nullopt when
// malformed, negative, or past INT64_MAX ms (then `*overflow`, when given,
// is set); callers bound it further (engine::ParseMillis: 2^32-1 s).
std::optional<int64_t> ParseDurationMs(std::string_view text, bool* overflow = nullptr);

// Parses an HTTP Retry-After value (delay seconds, or an IMF-fixdate relative
// to `now_ms`) into a delay in ms, never negative; nullopt when malformed.
std::optional<int64_t> ParseRetryAfterMs(std::string_view text, int64_t now_ms);

}  // namespace delayd
