#include "common/header_rules.h"

#include <strings.h>

namespace delayd {
namespace {

bool IEquals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && ::strncasecmp(a.data(), b.data(), a.size()) == 0;
}

bool IStartsWith(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && IEquals(s.substr(0, prefix.size()), prefix);
}

}  // namespace

bool IsHttpToken(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 32 || u >= 127 || std::string_view("()<>@,;:\\\"/[]?={}").find(c) != s.npos) {
      return false;
    }
  }
  return true;
}

std::string TargetHeaderFault(std::string_view name, std::string_view value) {
  if (!IsHttpToken(name)) return "is not a valid header name (RFC 9110 token)";
  static constexpr std::string_view kFraming[] = {"Content-Length", "Transfer-Encoding",
                                                  "Connection",     "Keep-Alive",
                                                  "Upgrade",        "TE",
                                                  "Trailer",        "Host",
                                                  "Expect",         "Proxy-Connection"};
  for (std::string_view f : kFraming) {
    if (IEquals(name, f)) return "is set by delayd's HTTP client, never by a job";
  }
  if (IStartsWith(name, "Proxy-")) return "is for proxies, never sent by a job";
  if (IStartsWith(name, "Delayd-")) return "is delayd's own: a job may not send a Delayd-* header";
  for (char c : value) {
    const auto u = static_cast<unsigned char>(c);
    if ((u < 32 && c != '\t') || u == 127) {
      return "has a value with a control character (CR, LF, NUL, ...)";
    }
  }
  return "";
}

}  // namespace delayd
