// A request header as OutRequest carries it ("Name: value"), split for the
// senders that carry headers other than as HTTP lines (gRPC metadata, Kafka
// record headers, AMQP header tables).
#pragma once

#include <optional>
#include <string_view>
#include <utility>

namespace delayd::delivery {

// The name and value of `line`, the value without the spaces after the
// colon; nullopt when there is no colon.
inline std::optional<std::pair<std::string_view, std::string_view>> SplitHeaderLine(
    std::string_view line) {
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos) return std::nullopt;
  std::string_view value = line.substr(colon + 1);
  while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  return std::pair{line.substr(0, colon), value};
}

}  // namespace delayd::delivery
