// amqp://[USER[:PASS]@]HOST[:PORT][/VHOST][?exchange=NAME&routing_key=KEY],
// and amqps:// for the same over TLS, the URLs of RabbitMQ push targets
// (doc/brokers.md, "RabbitMQ"): one parser for the API's checks, the target
// policy and the sender. PORT is 5672 when left out (5671 for amqps);
// USER:PASS is guest:guest; VHOST, NAME and KEY are percent-decoded, VHOST
// "/" when the path is empty or "/" (as pika reads it), NAME "" (the default
// exchange, which routes to the queue named by the routing key) and KEY ""
// when left out.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace delayd {

struct AmqpUrl {
  bool tls = false;  // amqps://
  std::string host;  // without brackets
  uint16_t port = 5672;
  std::string user = "guest";
  std::string password = "guest";
  std::string vhost = "/";
  std::string exchange;
  std::string routing_key;
};

// Whether `url` names a RabbitMQ target at all (its scheme), well formed or not.
bool IsAmqpUrl(std::string_view url);
// `url` read, or why it cannot be ("" on success).
std::optional<AmqpUrl> ParseAmqpUrl(std::string_view url, std::string* why = nullptr);

}  // namespace delayd
