#include "http/access.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

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

const char* ScopeName(Scope scope) {
  switch (scope) {
    case Scope::kRead:
      return "read";
    case Scope::kWrite:
      return "write";
    case Scope::kAdmin:
      return "admin";
    case Scope::kNone:
      break;
  }
  return "none";
}

std::optional<Scope> ParseScope(std::string_view name) {
  for (Scope s : {Scope::kRead, Scope::kWrite, Scope::kAdmin}) {
    if (name == ScopeName(s)) return s;
  }
  return std::nullopt;
}

namespace {
std::array<unsigned char, 32> Digest(std::string_view token) {
  std::array<unsigned char, 32> out;
  SHA256(reinterpret_cast<const unsigned char*>(token.data()), token.size(), out.data());
  return out;
}
}  // namespace

Status Tokens::Add(Scope scope, std::string_view token, std::string_view source) {
  if (token.empty()) return Status::InvalidArgument(std::string(source) + ": an empty token");
  for (unsigned char c : token) {
    if (c <= ' ' || c == 0x7f) {
      return Status::InvalidArgument(std::string(source) +
                                     ": a token may not hold spaces or control characters");
    }
  }
  const auto digest = Digest(token);
  for (const Entry& e : entries_) {
    if (e.digest == digest) {
      return Status::InvalidArgument(std::string(source) +
                                     ": a token given twice (each token has one scope)");
    }
  }
  entries_.push_back({scope, digest});
  return Status::Ok();
}

Scope Tokens::Find(std::string_view presented) const {
  const auto digest = Digest(presented);
  Scope found = Scope::kNone;
  for (const Entry& e : entries_) {
    // No early exit: every token is compared.
    if (CRYPTO_memcmp(e.digest.data(), digest.data(), digest.size()) == 0) found = e.scope;
  }
  return found;
}

Status ParseTokensFile(std::string_view text, std::string_view path, Tokens* out) {
  constexpr size_t kMaxTokens = 10'000;
  size_t line_no = 0;
  while (!text.empty()) {
    ++line_no;
    const size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text.remove_prefix(end == text.npos ? text.size() : end + 1);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) {
      line.remove_suffix(1);
    }
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    if (line.empty() || line.front() == '#') continue;
    const std::string where = std::string(path) + ":" + std::to_string(line_no);
    const size_t gap = line.find_first_of(" \t");
    const std::optional<Scope> scope = ParseScope(line.substr(0, gap));
    if (gap == line.npos || !scope) {
      return Status::InvalidArgument(where +
                                     ": a line is \"SCOPE TOKEN\", SCOPE admin, write or read");
    }
    std::string_view token = line.substr(gap);
    while (!token.empty() && (token.front() == ' ' || token.front() == '\t')) {
      token.remove_prefix(1);
    }
    if (out->size() >= kMaxTokens) {
      return Status::InvalidArgument(where + ": more than 10000 tokens");
    }
    if (Status s = out->Add(*scope, token, where); !s.ok()) return s;
  }
  return Status::Ok();
}

Scope ScopeOf(const Request& req, const AccessOptions& options) {
  if (options.tokens.empty()) return Scope::kAdmin;
  constexpr std::string_view kBearer = "Bearer ";
  std::string_view auth = req.authorization;
  if (auth.size() <= kBearer.size() || Lower(auth.substr(0, kBearer.size())) != "bearer ") {
    return Scope::kNone;
  }
  auth.remove_prefix(kBearer.size());
  return options.tokens.Find(auth);
}

}  // namespace delayd::http
