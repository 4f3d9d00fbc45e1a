#include "http/access.h"

#include <openssl/crypto.h>

#include <algorithm>
#include <cctype>
#include <charconv>

namespace delayd::http {
namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

// The host part of a Host header value: "[::1]:8080" -> "::1",
// "localhost:8080" -> "localhost"; lower-cased.
std::string HostPart(std::string_view host) {
  if (!host.empty() && host.front() == '[') {
    const size_t end = host.find(']');
    return Lower(host.substr(1, end == host.npos ? host.npos : end - 1));
  }
  const size_t colon = host.find(':');
  return Lower(host.substr(0, colon));
}

bool IsLoopbackV4(std::string_view h) {
  int parts = 0;
  size_t pos = 0;
  int first = -1;
  while (pos <= h.size()) {
    size_t dot = h.find('.', pos);
    std::string_view p = h.substr(pos, dot == h.npos ? h.npos : dot - pos);
    int v = -1;
    auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), v);
    if (ec != std::errc() || end != p.data() + p.size() || p.empty() || v < 0 || v > 255) {
      return false;
    }
    if (first < 0) first = v;
    ++parts;
    if (dot == h.npos) break;
    pos = dot + 1;
  }
  return parts == 4 && first == 127;
}

bool IsLoopbackName(const std::string& h) {
  return h == "localhost" || (h.size() > 10 && h.ends_with(".localhost")) || h == "::1" ||
         IsLoopbackV4(h);
}

std::string TrimSlash(std::string s) {
  while (!s.empty() && s.back() == '/') s.pop_back();
  return s;
}

}  // namespace

std::optional<Refusal> CheckHost(const Request& req, const AccessOptions& options) {
  if (!req.local_loopback || req.host.empty()) return std::nullopt;
  const std::string h = HostPart(req.host);
  if (IsLoopbackName(h)) return std::nullopt;
  for (const std::string& allowed : options.allowed_hosts) {
    if (Lower(allowed) == h) return std::nullopt;
  }
  return Refusal{403, "forbidden-host", "Host not allowed",
                 "this listener is bound to a loopback address and answers only loopback host "
                 "names (localhost, 127.0.0.1, [::1]) or those given with --http-allowed-hosts; "
                 "Host was \"" +
                     req.host.substr(0, 200) + "\""};
}

std::optional<Refusal> CheckOrigin(const Request& req, const AccessOptions& options) {
  if (req.origin.empty()) return std::nullopt;
  const std::string origin = TrimSlash(Lower(req.origin));
  // The server's own origin: the authority the page was loaded from, by
  // either scheme (behind a proxy that ends TLS, the page is https).
  const std::string host = Lower(req.host);
  if (!host.empty() && (origin == "http://" + host || origin == "https://" + host)) {
    return std::nullopt;
  }
  for (const std::string& allowed : options.allowed_origins) {
    if (TrimSlash(Lower(allowed)) == origin) return std::nullopt;
  }
  return Refusal{403, "cross-origin", "Cross-origin request refused",
                 "a page from origin \"" + req.origin.substr(0, 200) +
                     "\" may not call this API; list it with --http-allow-origin to allow it"};
}

std::optional<Refusal> CheckContentType(const Request& req) {
  if (ReadOnlyMethod(req.method)) return std::nullopt;
  if (req.content_type.empty() && req.body.empty()) return std::nullopt;
  std::string type = Lower(req.content_type.substr(0, req.content_type.find(';')));
  while (!type.empty() && (type.back() == ' ' || type.back() == '\t')) type.pop_back();
  if (type == "application/json" ||
      (type.rfind("application/", 0) == 0 && type.ends_with("+json"))) {
    return std::nullopt;
  }
  return Refusal{415, "unsupported-media-type", "Unsupported media type",
                 "a request that changes something must be sent as Content-Type: "
                 "application/json (was \"" +
                     req.content_type.substr(0, 100) + "\")"};
}

bool ReadOnlyMethod(std::string_view method) {
  return method == "GET" || method == "HEAD" || method == "OPTIONS";
}

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

Scope ScopeOf(const Request& req, const AccessOptions& options) {
  if (options.token.empty() && options.read_token.empty()) return Scope::kFull;
  constexpr std::string_view kBearer = "Bearer ";
  std::string_view auth = req.authorization;
  if (auth.size() <= kBearer.size() || Lower(auth.substr(0, kBearer.size())) != "bearer ") {
    return Scope::kNone;
  }
  auth.remove_prefix(kBearer.size());
  if (!options.token.empty() && ConstantTimeEquals(auth, options.token)) return Scope::kFull;
  if (!options.read_token.empty() && ConstantTimeEquals(auth, options.read_token)) {
    return Scope::kRead;
  }
  return Scope::kNone;
}

}  // namespace delayd::http
