// HOST:PORT as target URLs write it (grpc://, kafka://): HOST a name, an
// IPv4 address or a bracketed IPv6 address, PORT 1-65535.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace delayd {

struct HostPort {
  std::string host;  // without brackets
  uint16_t port = 0;
};

// `text` as HOST:PORT; with `default_port` (non-zero), ":PORT" may be left out.
std::optional<HostPort> ParseHostPort(std::string_view text, uint16_t default_port = 0);

}  // namespace delayd
