#include "brokers/kafka_properties.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

namespace delayd::brokers {
namespace {

const char* Env(const char* name) {
  if (std::string_view(name) == "KAFKA_PASSWORD") return "s3cr$t {x}";
  if (std::string_view(name) == "EMPTY") return "";
  return nullptr;
}

Result<KafkaSettings> Parse(std::string_view text) {
  return ParseKafkaProperties(text, "f.properties", &Env);
}

std::string Error(std::string_view text) {
  Result<KafkaSettings> r = Parse(text);
  EXPECT_FALSE(r.ok()) << text;
  return r.ok() ? "" : r.status().message();
}

TEST(KafkaPropertiesTest, ReadsKeyValueLinesSkippingCommentsAndBlanks) {
  auto r = Parse(
      "# TLS and SASL to the orders cluster\r\n"
      "! a comment too\n"
      "\n"
      "  security.protocol = SASL_SSL\r\n"
      "sasl.mechanisms=PLAIN\n"
      "sasl.username=delayd\n"
      "sasl.password=${KAFKA_PASSWORD}\n"
      "client.id=a=b\n"
      "compression.type=lz4\n"
      "batch.num.messages=500");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(*r, (KafkaSettings{{"security.protocol", "SASL_SSL"},
                               {"sasl.mechanisms", "PLAIN"},
                               {"sasl.username", "delayd"},
                               {"sasl.password", "s3cr$t {x}"},
                               {"client.id", "a=b"},
                               {"compression.type", "lz4"},
                               {"batch.num.messages", "500"}}));
}

TEST(KafkaPropertiesTest, OnlyWellFormedVariablesAreReplaced) {
  auto r = Parse("sasl.username=$HOME-${EMPTY}-${}-${1X}-${KAFKA_PASSWORD\n");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ((*r)[0].second, "$HOME--${}-${1X}-${KAFKA_PASSWORD");
  EXPECT_EQ(Error("sasl.password=${NOT_SET}"),
            "f.properties line 1 (sasl.password): ${NOT_SET} is not set in delayd's environment");
}

TEST(KafkaPropertiesTest, SettingsDelaydOwnsOrThatAreNotClientSideAreRefusedByLine) {
  for (const char* key : {"enable.idempotence", "acks", "bootstrap.servers", "message.timeout.ms",
                          "allow.auto.create.topics", "metadata.broker.list", "ssl", "batch."}) {
    const std::string err = Error(std::string("# x\n") + key + "=1\n");
    EXPECT_EQ(err.rfind(std::string("f.properties line 2 (") + key + "): not a setting", 0), 0u)
        << err;
  }
}

TEST(KafkaPropertiesTest, LibrdkafkasOwnChecksNameTheLineButNeverAValue) {
  EXPECT_EQ(Error("no equals sign"), "f.properties line 1: not key=value");
  EXPECT_EQ(Error("=x"), "f.properties line 1: no key before '='");
  std::string err = Error("ssl.no.such.setting=x");
  EXPECT_EQ(err.rfind("f.properties line 1 (ssl.no.such.setting): ", 0), 0u) << err;
  err = Error("linger.ms=soon");
  EXPECT_EQ(err.rfind("f.properties line 1 (linger.ms): ", 0), 0u) << err;
  // What only making a client finds: a CA file that is not there.
  err = Error("security.protocol=ssl\nssl.ca.location=/nonexistent/ca.pem\n");
  EXPECT_EQ(err.rfind("f.properties: ", 0), 0u) << err;
  EXPECT_NE(err.find("ssl.ca.location"), std::string::npos) << err;
}

TEST(KafkaPropertiesTest, SizesAreBounded) {
  EXPECT_NE(Error(std::string(kMaxPropertiesBytes + 1, '#')).find("larger than"),
            std::string::npos);
  std::string many;
  for (size_t i = 0; i <= kMaxPropertiesSettings; ++i) many += "linger.ms=1\n";
  EXPECT_NE(Error(many).find("more than 1000 settings"), std::string::npos);
}

TEST(KafkaPropertiesTest, LoadsEachNamedFileAndNamesTheOneItCannotRead) {
  const std::string dir = ::testing::TempDir();
  const std::string good = dir + "/good.properties", bad = dir + "/bad.properties";
  std::ofstream(good) << "security.protocol=plaintext\n";
  std::ofstream(bad) << "acks=0\n";
  auto sets = LoadKafkaProperties({{"orders", good}}, &Env);
  ASSERT_TRUE(sets.ok()) << sets.status().message();
  EXPECT_EQ(sets->at("orders"), (KafkaSettings{{"security.protocol", "plaintext"}}));
  auto r = LoadKafkaProperties({{"orders", good}, {"pay", bad}}, &Env);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message().rfind("kafka properties pay (" + bad + ") line 1 (acks)", 0), 0u)
      << r.status().message();
  r = LoadKafkaProperties({{"x", dir + "/missing.properties"}}, &Env);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("cannot be read"), std::string::npos);
  std::remove(good.c_str());
  std::remove(bad.c_str());
}

TEST(KafkaPropertiesTest, TheFlagIsNameEqualsFile) {
  auto f = ParsePropertiesFlag("orders=/etc/delayd/orders.properties");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->first, "orders");
  EXPECT_EQ(f->second, "/etc/delayd/orders.properties");
  EXPECT_FALSE(ParsePropertiesFlag("orders").ok());
  EXPECT_FALSE(ParsePropertiesFlag("orders=").ok());
  EXPECT_FALSE(ParsePropertiesFlag("=file").ok());
  EXPECT_FALSE(ParsePropertiesFlag("a b=file").ok());
  EXPECT_FALSE(ParsePropertiesFlag(std::string(65, 'n') + "=file").ok());
}

}  // namespace
}  // namespace delayd::brokers
