#include "common/amqp_url.h"

#include <cctype>

#include "common/host_port.h"

namespace delayd {

namespace {

constexpr size_t kMaxShortString = 255;  // AMQP's shortstr: vhost, exchange, routing key

std::optional<AmqpUrl> RefuseAmqp(std::string* why, std::string text) {
  if (why != nullptr) *why = std::move(text);
  return std::nullopt;
}

int AmqpHexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// `s` with its %XX escapes decoded; nullopt for a broken escape.
std::optional<std::string> AmqpDecode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    if (i + 2 >= s.size()) return std::nullopt;
    const int hi = AmqpHexValue(s[i + 1]), lo = AmqpHexValue(s[i + 2]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

// RabbitMQ's exchange names: letters, digits, '-', '_', '.', ':'.
bool ExchangeChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' ||
         c == ':';
}

}  // namespace

bool IsAmqpUrl(std::string_view url) {
  return url.rfind("amqp://", 0) == 0 || url.rfind("amqps://", 0) == 0;
}

std::optional<AmqpUrl> ParseAmqpUrl(std::string_view url, std::string* why) {
  if (!IsAmqpUrl(url)) return RefuseAmqp(why, "is not amqp:// or amqps://");
  AmqpUrl out;
  out.tls = url[4] == 's';
  url.remove_prefix(out.tls ? 8 : 7);
  const size_t query_at = url.find('?');
  std::string_view query = query_at == url.npos ? "" : url.substr(query_at + 1);
  url = url.substr(0, query_at);
  const size_t slash = url.find('/');
  std::string_view authority = url.substr(0, slash);
  std::string_view path = slash == url.npos ? "" : url.substr(slash + 1);
  if (const size_t at = authority.rfind('@'); at != authority.npos) {
    std::string_view userinfo = authority.substr(0, at);
    authority.remove_prefix(at + 1);
    const size_t colon = userinfo.find(':');
    std::optional<std::string> user = AmqpDecode(userinfo.substr(0, colon));
    std::optional<std::string> password =
        AmqpDecode(colon == userinfo.npos ? "" : userinfo.substr(colon + 1));
    if (!user || !password || user->empty() || user->size() > kMaxShortString ||
        password->size() > kMaxShortString) {
      return RefuseAmqp(why, "has a user or password that is empty, overlong or badly escaped");
    }
    out.user = std::move(*user);
    out.password = std::move(*password);
  }
  std::optional<HostPort> hp = ParseHostPort(authority, out.tls ? 5671 : 5672);
  if (!hp) {
    return RefuseAmqp(why, "has a broker that is not HOST[:PORT]: \"" +
                               std::string(authority.substr(0, 100)) + "\"");
  }
  out.host = std::move(hp->host);
  out.port = hp->port;
  if (!path.empty()) {
    // A '/' inside the vhost is written %2F: "a/b" is not a vhost.
    if (path.find('/') != path.npos) {
      return RefuseAmqp(why, "has a path of more than one segment (write a vhost's '/' as %2F)");
    }
    std::optional<std::string> vhost = AmqpDecode(path);
    if (!vhost || vhost->size() > kMaxShortString) {
      return RefuseAmqp(why, "has a virtual host that is overlong or badly escaped");
    }
    out.vhost = std::move(*vhost);
  }
  bool has_exchange = false, has_key = false;
  while (!query.empty()) {
    const size_t amp = query.find('&');
    std::string_view pair = query.substr(0, amp);
    query = amp == query.npos ? "" : query.substr(amp + 1);
    const size_t eq = pair.find('=');
    std::string_view name = pair.substr(0, eq);
    std::optional<std::string> value = AmqpDecode(eq == pair.npos ? "" : pair.substr(eq + 1));
    if (!value || value->size() > kMaxShortString) {
      return RefuseAmqp(why, "has a query value that is overlong or badly escaped");
    }
    if (name == "exchange" && !has_exchange) {
      has_exchange = true;
      for (char c : *value) {
        if (!ExchangeChar(c))
          return RefuseAmqp(why, "has an exchange name other than A-Z a-z 0-9 - _ . :");
      }
      out.exchange = std::move(*value);
    } else if (name == "routing_key" && !has_key) {
      has_key = true;
      out.routing_key = std::move(*value);
    } else {
      return RefuseAmqp(why, "takes no query but exchange=NAME and routing_key=KEY, once each");
    }
  }
  if (out.exchange.empty() && out.routing_key.empty()) {
    return RefuseAmqp(
        why,
        "names neither an exchange nor a routing key "
        "(?exchange=NAME&routing_key=KEY, or ?routing_key=QUEUE for the default exchange)");
  }
  return out;
}

}  // namespace delayd
