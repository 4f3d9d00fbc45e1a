#include "common/host_port.h"

#include <cctype>
#include <charconv>

namespace delayd {

std::optional<HostPort> ParseHostPort(std::string_view text, uint16_t default_port) {
  HostPort out;
  std::string_view port;  // empty: none written
  bool has_port = false;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == text.npos) return std::nullopt;
    out.host = std::string(text.substr(1, close - 1));
    for (char c : out.host) {
      if (!std::isxdigit(static_cast<unsigned char>(c)) && c != ':' && c != '.')
        return std::nullopt;
    }
    if (close + 1 < text.size()) {
      if (text[close + 1] != ':') return std::nullopt;
      has_port = true;
      port = text.substr(close + 2);
    }
  } else {
    const size_t colon = text.rfind(':');
    out.host = std::string(text.substr(0, colon));
    if (colon != text.npos) {
      has_port = true;
      port = text.substr(colon + 1);
    }
    for (char c : out.host) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_') {
        return std::nullopt;
      }
    }
  }
  if (out.host.empty() || out.host.size() > 253) return std::nullopt;
  if (!has_port) {
    if (default_port == 0) return std::nullopt;
    out.port = default_port;
    return out;
  }
  int p = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || p < 1 || p > 65535) {
    return std::nullopt;
  }
  out.port = static_cast<uint16_t>(p);
  return out;
}

}  // namespace delayd
