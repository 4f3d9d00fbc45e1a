// Percent-encoding (RFC 3986) of a path segment or a query value: every byte
// but the unreserved characters (letters, digits, - _ . ~) as %XX. Header
// only, so that delayctl, which links none of delayd's libraries, shares it.
#pragma once

#include <string>
#include <string_view>

namespace delayd {

inline std::string PercentEncode(std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    const bool unreserved = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                            (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.' || c == '~';
    if (unreserved) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

}  // namespace delayd
