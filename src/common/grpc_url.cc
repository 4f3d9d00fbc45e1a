#include "common/grpc_url.h"

#include <cctype>
#include <charconv>

namespace delayd {

bool IsGrpcUrl(std::string_view url) {
  return url.rfind("grpc://", 0) == 0 || url.rfind("grpcs://", 0) == 0;
}

std::optional<GrpcUrl> ParseGrpcUrl(std::string_view url) {
  GrpcUrl out;
  if (url.rfind("grpc://", 0) == 0) {
    url.remove_prefix(7);
  } else if (url.rfind("grpcs://", 0) == 0) {
    out.tls = true;
    url.remove_prefix(8);
  } else {
    return std::nullopt;
  }
  if (!url.empty() && url.back() == '/') url.remove_suffix(1);
  out.authority = std::string(url);
  size_t colon;
  if (!url.empty() && url.front() == '[') {
    const size_t close = url.find(']');
    if (close == url.npos || close + 1 >= url.size() || url[close + 1] != ':') return std::nullopt;
    out.host = std::string(url.substr(1, close - 1));
    colon = close + 1;
    for (char c : out.host) {
      if (!std::isxdigit(static_cast<unsigned char>(c)) && c != ':' && c != '.')
        return std::nullopt;
    }
  } else {
    colon = url.rfind(':');
    if (colon == url.npos) return std::nullopt;
    out.host = std::string(url.substr(0, colon));
    for (char c : out.host) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_') {
        return std::nullopt;
      }
    }
  }
  if (out.host.empty() || out.host.size() > 253) return std::nullopt;
  std::string_view port = url.substr(colon + 1);
  int p = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || p < 1 || p > 65535) {
    return std::nullopt;
  }
  out.port = static_cast<uint16_t>(p);
  return out;
}

std::string GrpcMetadataNameFault(std::string_view name) {
  if (name.empty()) return "is empty";
  std::string lower;
  for (char c : name) {
    const auto u = static_cast<unsigned char>(c);
    if (!std::isalnum(u) && c != '-' && c != '_' && c != '.') {
      return "is not a gRPC metadata name (letters, digits, '-', '_', '.')";
    }
    lower += static_cast<char>(std::tolower(u));
  }
  if (lower.rfind("grpc-", 0) == 0 || lower == "content-type" || lower == "te" ||
      lower == "user-agent" || lower == "host" || lower == "connection") {
    return "is gRPC's own";
  }
  if (lower.size() >= 4 && lower.compare(lower.size() - 4, 4, "-bin") == 0) {
    return "names binary metadata, which a target cannot send";
  }
  return "";
}

}  // namespace delayd
