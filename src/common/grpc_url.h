// grpc://HOST:PORT and grpcs://HOST:PORT, the URLs of gRPC push targets
// (doc/grpc.md): one parser for the API's checks, the target policy and the
// sender. HOST is a name, an IPv4 address or a bracketed IPv6 address; the
// port is required; a trailing "/" is allowed and nothing else follows.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace delayd {

struct GrpcUrl {
  bool tls = false;  // grpcs://
  std::string host;  // without brackets
  uint16_t port = 0;
  std::string authority;  // HOST:PORT as written (brackets kept)
};

// Whether `url` names a gRPC target at all (its scheme), well formed or not.
bool IsGrpcUrl(std::string_view url);
std::optional<GrpcUrl> ParseGrpcUrl(std::string_view url);

// Why a target header cannot be sent to a gRPC target as metadata (sent
// lowercased), or "" when it can: its name must be letters, digits, '-',
// '_' or '.', and neither gRPC's own (grpc-*, content-type, te, ...) nor
// binary (-bin).
std::string GrpcMetadataNameFault(std::string_view name);

}  // namespace delayd
