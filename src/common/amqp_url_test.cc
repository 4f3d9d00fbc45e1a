#include "common/amqp_url.h"

#include <gtest/gtest.h>

namespace delayd {
namespace {

TEST(AmqpUrlTest, ReadsEveryPartWithRabbitMqsDefaults) {
  std::optional<AmqpUrl> u = ParseAmqpUrl(
      "amqp://app:p%40ss@mq.internal:5673/shop%2Fprod?exchange=jobs&routing_key=due.%2A");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->host, "mq.internal");
  EXPECT_EQ(u->port, 5673);
  EXPECT_EQ(u->user, "app");
  EXPECT_EQ(u->password, "p@ss") << "percent-decoded";
  EXPECT_EQ(u->vhost, "shop/prod");
  EXPECT_EQ(u->exchange, "jobs");
  EXPECT_EQ(u->routing_key, "due.*");

  u = ParseAmqpUrl("amqp://127.0.0.1?routing_key=orders");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->port, 5672);
  EXPECT_EQ(u->user, "guest");
  EXPECT_EQ(u->password, "guest");
  EXPECT_EQ(u->vhost, "/") << "no path: the default vhost";
  EXPECT_EQ(u->exchange, "") << "the default exchange";
  EXPECT_EQ(u->routing_key, "orders");
  ASSERT_TRUE(u = ParseAmqpUrl("amqp://[::1]:5672/?exchange=amq.topic"));
  EXPECT_EQ(u->host, "::1");
  EXPECT_EQ(u->vhost, "/") << "\"/\" as pika reads it";
  EXPECT_EQ(u->routing_key, "");
  EXPECT_FALSE(u->tls);
  ASSERT_TRUE(u = ParseAmqpUrl("amqps://app:pw@mq.example.com/?exchange=x"));
  EXPECT_TRUE(u->tls);
  EXPECT_EQ(u->host, "mq.example.com");
  EXPECT_EQ(u->port, 5671) << "amqps' own port";
  EXPECT_EQ(u->user, "app");
  ASSERT_TRUE(u = ParseAmqpUrl("amqps://[::1]:5673?routing_key=q"));
  EXPECT_EQ(u->port, 5673);
  EXPECT_TRUE(IsAmqpUrl("amqps://h/?exchange=x"));
  EXPECT_FALSE(IsAmqpUrl("http://h/"));
}

TEST(AmqpUrlTest, RefusesWhatRabbitMqCouldNotBeAskedForSayingWhy) {
  const char* bad[] = {
      "http://h/?exchange=x",
      "amqp://h/?exchange=x&exchange=y",
      "amqp://h/?queue=x",
      "amqp://h/",                      // neither exchange nor routing key
      "amqp://h/a/b?exchange=x",        // two path segments
      "amqp://h/%G1?exchange=x",        // a broken escape
      "amqp://h/%2?exchange=x",         // a cut escape
      "amqp://h/?exchange=bad%20name",  // not an exchange name
      "amqp://h:0/?exchange=x",         // no such port
      "amqp://@h/?exchange=x",          // an empty user
      "amqp://bad host/?exchange=x",
      "amqps:/h/?exchange=x",
  };
  for (const char* url : bad) {
    std::string why;
    EXPECT_FALSE(ParseAmqpUrl(url, &why)) << url;
    EXPECT_FALSE(why.empty()) << url;
  }
  std::string why;
  ParseAmqpUrl("amqp://h/?routing_key=" + std::string(256, 'k'), &why);
  EXPECT_NE(why.find("overlong"), std::string::npos) << why;
}

}  // namespace
}  // namespace delayd
