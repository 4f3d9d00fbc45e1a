// TargetPolicy: which hosts, addresses and ports push deliveries and alert
// webhooks may reach. Any caller of /v1 chooses targets, so without a policy
// delayd would send requests wherever the server can: to a cloud's metadata
// service at 169.254.169.254, to delayd's own API, to any internal host.
//
// A rule is HOST[:PORT]. HOST is `*`, a host name (`hooks.example.com`), a
// wildcard for its subdomains (`*.example.com`), an IPv4 address or CIDR
// (`10.0.0.0/8`), or an IPv6 address or CIDR, in brackets when a port
// follows (`[fd00::]/8:443`, `fd00::/8`). A rule without a port covers every
// port.
//
// A target is refused when a deny rule matches it; otherwise, when there are
// allow rules, it must match one of them. Link-local (169.254.0.0/16,
// fe80::/10) and unspecified (0.0.0.0/8, ::) addresses are always denied;
// loopback and private addresses are allowed unless a rule says otherwise.
// IPv4-mapped IPv6 addresses are judged as the IPv4 address they carry.
//
// The policy is applied twice: to the URL when a job, topic, timer or alert
// names it (host names by name, literal addresses by address), and to every
// address a connection is about to be opened to, after DNS, so a name that
// later resolves elsewhere (DNS rebinding) cannot get round it. delayd does
// not follow redirects: a 3xx answer is the attempt's result.
//
// Thread safety: immutable after Make(); any thread may call the checks.
#pragma once

#include <sys/socket.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace delayd::delivery {

class TargetPolicy {
 public:
  // The default policy: only the built-in denies.
  TargetPolicy();
  // A policy from --target-allow and --target-deny rules; an error names the
  // rule it cannot read.
  static Result<TargetPolicy> Make(const std::vector<std::string>& allow,
                                   const std::vector<std::string>& deny);

  // Checks an http(s) URL before anything is stored. Addresses behind a host
  // name are checked when a connection is made; here only rules that can be
  // decided without DNS refuse it. The error says which rule refused.
  Status CheckUrl(const std::string& url) const;
  // Whether a connection to `address` (port included) may be opened for a
  // request to `host` (the URL's host name).
  Status CheckAddress(std::string_view host, const sockaddr* address) const;
  // The host a URL names, as the checks compare it ("" when unreadable).
  static std::string HostOf(const std::string& url);

 private:
  struct Rule {
    enum class Kind { kAny, kName, kSuffix, kCidr } kind = Kind::kAny;
    std::string text;               // as given, for error messages
    std::string name;               // kName: the name; kSuffix: ".example.com"
    std::array<uint8_t, 16> net{};  // kCidr: IPv6, IPv4 mapped into ::ffff:0:0/96
    int prefix = 0;
    uint16_t port = 0;  // 0: any port
  };
  using Address = std::array<uint8_t, 16>;

  static Result<Rule> ParseRule(const std::string& text);
  // nullopt: the rule needs an address that is not known yet.
  static std::optional<bool> Matches(const Rule& r, std::string_view host,
                                     const std::optional<Address>& address, uint16_t port);
  Status Check(std::string_view host, const std::optional<Address>& address, uint16_t port) const;

  std::vector<Rule> allow_;
  std::vector<Rule> deny_;
};

}  // namespace delayd::delivery
