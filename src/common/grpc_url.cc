#include "common/grpc_url.h"

#include <cctype>

#include "common/host_port.h"

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
  std::optional<HostPort> hp = ParseHostPort(url);
  if (!hp) return std::nullopt;
  out.host = std::move(hp->host);
  out.port = hp->port;
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
