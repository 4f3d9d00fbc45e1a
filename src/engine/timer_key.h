// The key of a job a timer fire creates, "timer:<timer id>:<fire ms>": one
// job per fire time, enforced by the key's uniqueness. The prefix is
// reserved: a key submitted over the API cannot start with it, so a job with
// such a key is a timer's, and push deliveries can name the timer and the
// fire from it.
#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace delayd::engine {

inline constexpr std::string_view kTimerKeyPrefix = "timer:";

inline std::string TimerFireKey(uint64_t timer_id, int64_t fire_ms) {
  return std::string(kTimerKeyPrefix) + std::to_string(timer_id) + ":" + std::to_string(fire_ms);
}

// The timer and fire time a timer fire's job key names.
struct FireOfKey {
  uint64_t timer_id = 0;
  int64_t fire_ms = 0;
};

// The timer and fire time a key names; nullopt for any other key.
inline std::optional<FireOfKey> ParseTimerFireKey(std::string_view key) {
  if (key.substr(0, kTimerKeyPrefix.size()) != kTimerKeyPrefix) return std::nullopt;
  key.remove_prefix(kTimerKeyPrefix.size());
  const size_t colon = key.find(':');
  if (colon == key.npos) return std::nullopt;
  FireOfKey f;
  const char* end = key.data() + colon;
  auto [p, ec] = std::from_chars(key.data(), end, f.timer_id);
  if (ec != std::errc() || p != end) return std::nullopt;
  auto [q, ec2] = std::from_chars(end + 1, key.data() + key.size(), f.fire_ms);
  if (ec2 != std::errc() || q != key.data() + key.size()) return std::nullopt;
  return f;
}

}  // namespace delayd::engine
