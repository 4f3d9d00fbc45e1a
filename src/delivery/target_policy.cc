#include "delivery/target_policy.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <memory>

#include "common/amqp_url.h"
#include "common/grpc_url.h"
#include "common/kafka_url.h"

namespace delayd::delivery {
namespace {

using Address = std::array<uint8_t, 16>;

// Denied whatever the rules say: where cloud metadata services and
// link-local neighbours answer, and addresses that mean "this host, any
// interface".
constexpr const char* kBuiltInDenies[] = {"169.254.0.0/16", "fe80::/10", "0.0.0.0/8", "::/128"};

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// A host as rules compare it: lower case, without brackets or a final dot.
std::string NormalHost(std::string_view host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (!host.empty() && host.back() == '.') host.remove_suffix(1);
  return Lower(host);
}

// An IPv4 address maps into ::ffff:0:0/96, so one comparison serves both
// families and an IPv4-mapped IPv6 address is judged as its IPv4 address.
std::optional<Address> ParseAddress(const std::string& text) {
  Address a{};
  in_addr v4{};
  if (inet_pton(AF_INET, text.c_str(), &v4) == 1) {
    a[10] = a[11] = 0xff;
    std::memcpy(&a[12], &v4, 4);
    return a;
  }
  in6_addr v6{};
  if (inet_pton(AF_INET6, text.c_str(), &v6) == 1) {
    std::memcpy(a.data(), &v6, 16);
    return a;
  }
  return std::nullopt;
}

bool IsV4Mapped(const Address& a) {
  return std::all_of(a.begin(), a.begin() + 10, [](uint8_t b) { return b == 0; }) &&
         a[10] == 0xff && a[11] == 0xff;
}

bool InPrefix(const Address& a, const Address& net, int prefix) {
  for (int bit = 0; bit < prefix; ++bit) {
    const int mask = 0x80 >> (bit % 8);
    if ((a[bit / 8] & mask) != (net[bit / 8] & mask)) return false;
  }
  return true;
}

std::string AddressText(const Address& a) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (IsV4Mapped(a)) {
    inet_ntop(AF_INET, &a[12], buf, sizeof buf);
  } else {
    inet_ntop(AF_INET6, a.data(), buf, sizeof buf);
  }
  return buf;
}

bool ValidName(std::string_view name) {
  if (name.empty() || name.size() > 253) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_';
  });
}

struct UrlParts {
  std::string host;
  uint16_t port = 0;
};

// The host and port curl will connect to for `url` (curl normalizes the
// host: "0x7f.1" is 127.0.0.1); nullopt when curl cannot read it.
std::optional<UrlParts> ParseUrl(const std::string& url) {
  if (IsGrpcUrl(url)) {
    std::optional<GrpcUrl> g = ParseGrpcUrl(url);
    if (!g) return std::nullopt;
    return UrlParts{NormalHost(g->host), g->port};
  }
  std::unique_ptr<CURLU, decltype(&curl_url_cleanup)> u(curl_url(), &curl_url_cleanup);
  if (!u || curl_url_set(u.get(), CURLUPART_URL, url.c_str(), 0) != CURLUE_OK) {
    return std::nullopt;
  }
  char* host = nullptr;
  char* port = nullptr;
  UrlParts out;
  bool ok = curl_url_get(u.get(), CURLUPART_HOST, &host, 0) == CURLUE_OK &&
            curl_url_get(u.get(), CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) == CURLUE_OK;
  if (ok) {
    out.host = NormalHost(host);
    int p = 0;
    auto [end, ec] = std::from_chars(port, port + std::strlen(port), p);
    ok = ec == std::errc() && *end == '\0' && p > 0 && p < 65536;
    out.port = static_cast<uint16_t>(p);
  }
  curl_free(host);
  curl_free(port);
  if (!ok) return std::nullopt;
  return out;
}

}  // namespace

TargetPolicy::TargetPolicy() {
  for (const char* rule : kBuiltInDenies) deny_.push_back(ParseRule(rule).value());
}

Result<TargetPolicy::Rule> TargetPolicy::ParseRule(const std::string& text) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("target rule '" + text + "': " + why);
  };
  std::string host = text;
  std::string port;
  if (!host.empty() && host.front() == '[') {
    const size_t close = host.find(']');
    if (close == std::string::npos) return bad("unclosed [");
    std::string rest = host.substr(close + 1);
    host = host.substr(1, close - 1);
    if (!rest.empty() && rest.front() == '/') {  // [fd00::]/8:443
      const size_t colon = rest.find(':');
      host += rest.substr(0, colon);
      rest = colon == std::string::npos ? "" : rest.substr(colon);
    }
    if (!rest.empty()) {
      if (rest.front() != ':') return bad("expected :PORT after ]");
      port = rest.substr(1);
    }
  } else if (std::count(host.begin(), host.end(), ':') == 1) {
    port = host.substr(host.find(':') + 1);
    host = host.substr(0, host.find(':'));
  }
  Rule r;
  r.text = text;
  if (!port.empty() && port != "*") {
    int p = 0;
    auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
    if (ec != std::errc() || end != port.data() + port.size() || p < 1 || p > 65535) {
      return bad("the port must be 1-65535 or *");
    }
    r.port = static_cast<uint16_t>(p);
  }
  if (host == "*") {
    r.kind = Rule::Kind::kAny;
    return r;
  }
  const size_t slash = host.find('/');
  std::optional<Address> address = ParseAddress(host.substr(0, slash));
  if (address) {
    const bool v4 = host.find(':') == std::string::npos;
    int prefix = v4 ? 32 : 128;
    if (slash != std::string::npos) {
      const std::string bits = host.substr(slash + 1);
      auto [end, ec] = std::from_chars(bits.data(), bits.data() + bits.size(), prefix);
      if (ec != std::errc() || end != bits.data() + bits.size() || prefix < 0 ||
          prefix > (v4 ? 32 : 128)) {
        return bad(std::string("the prefix must be 0-") + (v4 ? "32" : "128"));
      }
    }
    r.kind = Rule::Kind::kCidr;
    r.net = *address;
    r.prefix = v4 ? prefix + 96 : prefix;
    return r;
  }
  if (slash != std::string::npos) return bad("not an IP address before /");
  if (host.rfind("*.", 0) == 0 && ValidName(host.substr(2))) {
    r.kind = Rule::Kind::kSuffix;
    r.name = NormalHost(host.substr(1));
    return r;
  }
  if (!ValidName(host)) {
    return bad("expected *, a host name, *.domain, an IP address or CIDR, with an optional :PORT");
  }
  r.kind = Rule::Kind::kName;
  r.name = NormalHost(host);
  return r;
}

Result<TargetPolicy> TargetPolicy::Make(const std::vector<std::string>& allow,
                                        const std::vector<std::string>& deny) {
  TargetPolicy p;
  for (auto [texts, rules] : {std::pair{&allow, &p.allow_}, {&deny, &p.deny_}}) {
    for (const std::string& text : *texts) {
      Result<Rule> r = ParseRule(text);
      if (!r.ok()) return r.status();
      rules->push_back(std::move(*r));
    }
  }
  return p;
}

std::optional<bool> TargetPolicy::Matches(const Rule& r, std::string_view host,
                                          const std::optional<Address>& address, uint16_t port) {
  if (r.port != 0 && r.port != port) return false;
  switch (r.kind) {
    case Rule::Kind::kAny:
      return true;
    case Rule::Kind::kName:
      return host == r.name;
    case Rule::Kind::kSuffix:
      return host.size() > r.name.size() &&
             host.compare(host.size() - r.name.size(), r.name.size(), r.name) == 0;
    case Rule::Kind::kCidr:
      if (!address) return std::nullopt;
      return InPrefix(*address, r.net, r.prefix);
  }
  return false;
}

Status TargetPolicy::Check(std::string_view host, const std::optional<Address>& address,
                           uint16_t port) const {
  const std::string what =
      (address ? AddressText(*address) : std::string(host)) + ":" + std::to_string(port);
  for (const Rule& r : deny_) {
    if (Matches(r, host, address, port) == std::optional<bool>(true)) {
      const bool built_in = &r < deny_.data() + std::size(kBuiltInDenies);
      return Status::InvalidArgument(
          what + " is denied by " +
          (built_in ? "the built-in rule " + r.text + " (link-local and unspecified addresses)"
                    : "--target-deny " + r.text));
    }
  }
  if (allow_.empty()) return Status::Ok();
  for (const Rule& r : allow_) {
    // An address rule cannot be decided before DNS: the connection decides.
    if (Matches(r, host, address, port) != std::optional<bool>(false)) return Status::Ok();
  }
  return Status::InvalidArgument(what + " matches no --target-allow rule");
}

Status TargetPolicy::CheckUrl(const std::string& url) const {
  if (IsKafkaUrl(url)) {
    // Each bootstrap broker; the brokers the cluster advertises are checked
    // as they are connected to (brokers/kafka_sender.h).
    std::optional<KafkaUrl> k = ParseKafkaUrl(url);
    if (!k) return Status::InvalidArgument("is not a URL this server can read");
    for (const HostPort& b : k->brokers) {
      const std::string host = NormalHost(b.host);
      if (Status s = Check(host, ParseAddress(host), b.port); !s.ok()) return s;
    }
    return Status::Ok();
  }
  if (IsAmqpUrl(url)) {
    std::optional<AmqpUrl> a = ParseAmqpUrl(url);
    if (!a) return Status::InvalidArgument("is not a URL this server can read");
    const std::string host = NormalHost(a->host);
    return Check(host, ParseAddress(host), a->port);
  }
  std::optional<UrlParts> parts = ParseUrl(url);
  if (!parts) return Status::InvalidArgument("is not a URL this server can read");
  return Check(parts->host, ParseAddress(parts->host), parts->port);
}

Status TargetPolicy::CheckAddress(std::string_view host, const sockaddr* sa) const {
  Address a{};
  uint16_t port = 0;
  if (sa->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    a[10] = a[11] = 0xff;
    std::memcpy(&a[12], &in->sin_addr, 4);
    port = ntohs(in->sin_port);
  } else if (sa->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    std::memcpy(a.data(), &in6->sin6_addr, 16);
    port = ntohs(in6->sin6_port);
  } else {
    return Status::InvalidArgument("a connection that is not TCP over IP is not allowed");
  }
  return Check(NormalHost(host), a, port);
}

std::string TargetPolicy::HostOf(const std::string& url) {
  std::optional<UrlParts> parts = ParseUrl(url);
  return parts ? parts->host : std::string();
}

}  // namespace delayd::delivery
