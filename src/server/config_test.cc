#include "server/config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

namespace delayd::server {
namespace {

ParsedArgs Parse(std::vector<std::string> args) {
  args.insert(args.begin(), "delayd");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return ParseArgs(static_cast<int>(argv.size()), argv.data());
}

TEST(ConfigTest, Defaults) {
  ParsedArgs a = Parse({});
  ASSERT_FALSE(a.exit);
  EXPECT_EQ(a.config.data_dir, "./data");
  EXPECT_EQ(a.config.beanstalk, std::vector<std::string>{"127.0.0.1:11300"});
  EXPECT_EQ(a.config.max_job_size, 65535u);
  EXPECT_EQ(a.config.topic_concurrency, 128u);
  EXPECT_TRUE(Parse({"--topic-concurrency", "0"}).exit) << "at least one delivery per topic";
}

TEST(ConfigTest, TokensComeFromAFlagAFileOrTheEnvironment) {
  using http::Scope;
  const std::string dir = ::testing::TempDir();
  const std::string file = dir + "/delayd-token-" + std::to_string(getpid());
  std::ofstream(file) << "from-file\r\nsecond line\n";
  static char* (*no_env)(const char*) = [](const char*) -> char* { return nullptr; };
  static char* (*env)(const char*) = [](const char* name) -> char* {
    static char admin[] = "from-env", write[] = "write-env", read[] = "read-env";
    const std::string n = name;
    return n == "DELAYD_API_TOKEN"         ? admin
           : n == "DELAYD_API_WRITE_TOKEN" ? write
           : n == "DELAYD_API_READ_TOKEN"  ? read
                                           : nullptr;
  };
  Config c;
  c.api_token_file = file;
  auto t = LoadTokens(c, no_env);
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->size(), 1u);
  EXPECT_EQ(t->Find("from-file"), Scope::kAdmin);
  EXPECT_EQ(t->Find("second"), Scope::kNone);
  t = LoadTokens(Config{}, env);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->Find("from-env"), Scope::kAdmin);
  EXPECT_EQ(t->Find("write-env"), Scope::kWrite);
  EXPECT_EQ(t->Find("read-env"), Scope::kRead);
  Config flag;
  flag.api_token = "from-flag";
  t = LoadTokens(flag, env);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->Find("from-flag"), Scope::kAdmin) << "a flag wins over the environment";
  EXPECT_EQ(t->Find("from-env"), Scope::kNone);
  EXPECT_EQ(t->Find("write-env"), Scope::kWrite) << "the other scopes still from it";
  EXPECT_TRUE(LoadTokens(Config{}, no_env)->empty()) << "no token anywhere: the API is open";
  Config both;
  both.api_token = "x";
  both.api_token_file = file;
  EXPECT_FALSE(LoadTokens(both, no_env).ok());
  Config missing;
  missing.api_read_token_file = dir + "/no-such-token-file";
  EXPECT_FALSE(LoadTokens(missing, no_env).ok());
  Config read_only;
  read_only.api_read_token = "r";
  EXPECT_EQ(LoadTokens(read_only, no_env)->Find("r"), Scope::kRead)
      << "read tokens alone: an API nobody can change";
  Config same;
  same.api_token = same.api_read_token = "t";
  EXPECT_FALSE(LoadTokens(same, no_env).ok()) << "one token, two scopes";
  Config spaced;
  spaced.api_write_token = "two words";
  EXPECT_FALSE(LoadTokens(spaced, no_env).ok());
  std::filesystem::remove(file);
}

TEST(ConfigTest, ATokensFileAddsTokensWithTheirScopes) {
  static char* (*no_env)(const char*) = [](const char*) -> char* { return nullptr; };
  const std::string file = ::testing::TempDir() + "/delayd-tokens-" + std::to_string(getpid());
  std::ofstream(file) << "# the on-call team\nadmin ops-1\nwrite svc-orders\nread grafana\n";
  Config c;
  c.api_tokens_file = file;
  c.api_token = "flag-admin";
  auto t = LoadTokens(c, no_env);
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->size(), 4u);
  EXPECT_EQ(t->Find("svc-orders"), http::Scope::kWrite);
  EXPECT_EQ(t->Find("grafana"), http::Scope::kRead);
  std::ofstream(file) << "# all revoked\n";
  auto empty = LoadTokens(c, no_env);
  ASSERT_FALSE(empty.ok()) << "an emptied file would open the API";
  EXPECT_NE(empty.status().message().find("has no token"), std::string::npos);
  std::ofstream(file) << "write flag-admin\n";
  auto twice = LoadTokens(c, no_env);
  ASSERT_FALSE(twice.ok());
  EXPECT_EQ(twice.status().message().find("flag-admin"), std::string::npos) << "no token text";
  std::ofstream(file) << std::string((1 << 20) + 1, '#');
  EXPECT_FALSE(LoadTokens(c, no_env).ok()) << "over 1 MiB";
  std::filesystem::remove(file);
  EXPECT_FALSE(LoadTokens(c, no_env).ok()) << "gone";
}

TEST(ConfigTest, BeanstalkFlagRepeats) {
  ParsedArgs a = Parse({"--beanstalk", "127.0.0.1:0", "--beanstalk", "unix:/tmp/x.sock"});
  EXPECT_EQ(a.config.beanstalk, (std::vector<std::string>{"127.0.0.1:0", "unix:/tmp/x.sock"}));
}

TEST(ConfigTest, TargetRulesRepeat) {
  ParsedArgs a = Parse({"--target-deny", "127.0.0.0/8", "--target-allow", "*.example.com:443",
                        "--target-deny", "[::1]"});
  ASSERT_FALSE(a.exit);
  EXPECT_EQ(a.config.target_deny, (std::vector<std::string>{"127.0.0.0/8", "[::1]"}));
  EXPECT_EQ(a.config.target_allow, std::vector<std::string>{"*.example.com:443"});
}

TEST(ConfigTest, BeanstalkdAliases) {
  ParsedArgs a = Parse({"-l", "127.0.0.1", "-p", "0", "-z", "100", "-b", "/tmp/b", "-V"});
  ASSERT_FALSE(a.exit);
  EXPECT_EQ(a.config.beanstalk, std::vector<std::string>{"127.0.0.1:0"});
  EXPECT_EQ(a.config.max_job_size, 100u);
  EXPECT_EQ(a.config.data_dir, "/tmp/b");
  EXPECT_EQ(a.config.log_level, "debug");
  EXPECT_EQ(Parse({"-l", "unix:/tmp/s"}).config.beanstalk, std::vector<std::string>{"unix:/tmp/s"});
  EXPECT_EQ(Parse({"-p", "11400"}).config.beanstalk, std::vector<std::string>{"127.0.0.1:11400"});
  EXPECT_FALSE(Parse({"-f", "50", "-F"}).exit) << "beanstalkd's fsync flags are accepted";
}

TEST(ConfigTest, UnknownLogLevelFails) {
  EXPECT_TRUE(Parse({"--log-level", "loud"}).exit);
  EXPECT_FALSE(Parse({"--log-level", "warn"}).exit);
}

TEST(ConfigTest, UnknownFlagFails) {
  ParsedArgs a = Parse({"--no-such-flag"});
  EXPECT_TRUE(a.exit);
  EXPECT_NE(a.exit_code, 0);
}

TEST(ConfigTest, SyncDelayIsBounded) {
  EXPECT_EQ(Parse({}).config.sync_delay_ms, 10);
  EXPECT_EQ(Parse({"--sync-delay-ms", "0"}).config.sync_delay_ms, 0) << "the strict policy";
  EXPECT_EQ(Parse({"--sync-delay-ms", "1000"}).config.sync_delay_ms, 1000);
  EXPECT_TRUE(Parse({"--sync-delay-ms", "1001"}).exit);
  EXPECT_TRUE(Parse({"--sync-delay-ms", "-1"}).exit);
}

TEST(ConfigTest, MetricsAuthNeedsAToken) {
  ParsedArgs a = Parse({"--api-token", "t", "--metrics-auth"});
  EXPECT_FALSE(a.exit);
  EXPECT_TRUE(a.config.metrics_auth);
  EXPECT_FALSE(Parse({"--api-token", "t"}).config.metrics_auth);
  ParsedArgs no_token = Parse({"--metrics-auth"});
  EXPECT_TRUE(no_token.exit) << "no token to ask for";
  EXPECT_EQ(no_token.exit_code, 2);
}

TEST(ConfigTest, ClusterNeedsAStoreAndABoundedLease) {
  Config d = Parse({}).config;
  EXPECT_FALSE(d.cluster);
  EXPECT_EQ(d.lease_ms, 3000);
  ParsedArgs a =
      Parse({"--store", "postgres://db/x", "--cluster", "--node-id", "a1", "--lease-ms", "1500"});
  EXPECT_FALSE(a.exit);
  EXPECT_TRUE(a.config.cluster);
  EXPECT_EQ(a.config.node_id, "a1");
  EXPECT_EQ(a.config.lease_ms, 1500);
  ParsedArgs no_store = Parse({"--cluster"});
  EXPECT_TRUE(no_store.exit) << "a cluster of SQLite files cannot share anything";
  EXPECT_EQ(no_store.exit_code, 2);
  EXPECT_TRUE(Parse({"--store", "x", "--cluster", "--lease-ms", "299"}).exit);
}

class TomlTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& text) {
    path_ = std::filesystem::temp_directory_path() /
            ("delayd-config-" + std::to_string(getpid()) + ".toml");
    std::ofstream(path_) << text;
    return path_.string();
  }
  void TearDown() override { std::filesystem::remove(path_); }
  std::filesystem::path path_;
};

TEST_F(TomlTest, FileSetsKeysAndFlagsWin) {
  std::string p = Write(
      "data-dir = \"/var/lib/delayd\"\nbeanstalk = [\"127.0.0.1:0\"]\n"
      "max-job-size = 1000\ntopic-concurrency = 16\nmax-deliveries = 64\n");
  ParsedArgs a = Parse({"--config", p, "--max-job-size", "2000", "--max-deliveries", "32"});
  ASSERT_FALSE(a.exit);
  EXPECT_EQ(a.config.data_dir, "/var/lib/delayd");
  EXPECT_EQ(a.config.beanstalk, std::vector<std::string>{"127.0.0.1:0"});
  EXPECT_EQ(a.config.max_job_size, 2000u);
  EXPECT_EQ(a.config.topic_concurrency, 16u);
  EXPECT_EQ(a.config.max_deliveries, 32u);
}

TEST_F(TomlTest, TheReadyWindowComesFromAFlagOrTheFile) {
  EXPECT_EQ(Parse({}).config.ready_window, 4096u);
  EXPECT_EQ(Parse({"--ready-window", "0"}).config.ready_window, 0u) << "0: all in memory";
  EXPECT_TRUE(Parse({"--ready-window", "-1"}).exit);
  std::string p = Write("ready-window = 64\n");
  EXPECT_EQ(Parse({"--config", p}).config.ready_window, 64u);
  EXPECT_EQ(Parse({"--config", p, "--ready-window", "8"}).config.ready_window, 8u);
  Config c;
  EXPECT_FALSE(LoadToml(Write("ready-window = -5\n"), c).ok());
}

TEST_F(TomlTest, TheStoreComesFromTheFileUnlessTheFlagGivesIt) {
  EXPECT_TRUE(Parse({}).config.store.empty()) << "SQLite unless told";
  std::string p = Write("store = \"postgres://delayd@db:5432/jobs\"\n");
  EXPECT_EQ(Parse({"--config", p}).config.store, "postgres://delayd@db:5432/jobs");
  EXPECT_EQ(Parse({"--config", p, "--store", "host=other dbname=x"}).config.store,
            "host=other dbname=x");
  Config c;
  EXPECT_FALSE(LoadToml(Write("store = 5\n"), c).ok());
}

TEST_F(TomlTest, ClusterKeysComeFromTheFile) {
  std::string p =
      Write("store = \"postgres://db/x\"\ncluster = true\nnode-id = \"n7\"\nlease-ms = 6000\n");
  ParsedArgs a = Parse({"--config", p});
  EXPECT_FALSE(a.exit);
  EXPECT_TRUE(a.config.cluster);
  EXPECT_EQ(a.config.node_id, "n7");
  EXPECT_EQ(a.config.lease_ms, 6000);
  EXPECT_EQ(Parse({"--config", p, "--node-id", "n8"}).config.node_id, "n8");
  Config c;
  EXPECT_FALSE(LoadToml(Write("cluster = \"yes\"\n"), c).ok());
  EXPECT_FALSE(LoadToml(Write("lease-ms = 10\n"), c).ok());
}

TEST_F(TomlTest, TargetRulesFromTheFileUnlessFlagsGiveThem) {
  std::string p = Write("target-deny = [\"10.0.0.0/8\", \"*.corp\"]\ntarget-allow = \"*\"\n");
  ParsedArgs a = Parse({"--config", p});
  ASSERT_FALSE(a.exit);
  EXPECT_EQ(a.config.target_deny, (std::vector<std::string>{"10.0.0.0/8", "*.corp"}));
  EXPECT_EQ(a.config.target_allow, std::vector<std::string>{"*"});
  a = Parse({"--config", p, "--target-deny", "192.168.0.0/16"});
  EXPECT_EQ(a.config.target_deny, std::vector<std::string>{"192.168.0.0/16"});
  Config c;
  EXPECT_FALSE(LoadToml(Write("target-deny = 5\n"), c).ok());
  EXPECT_FALSE(LoadToml(Write("target-allow = [1]\n"), c).ok());
}

TEST_F(TomlTest, KafkaPropertiesFilesByNameFromTheFileUnlessFlagsGiveThem) {
  using Files = std::map<std::string, std::string>;
  std::string p = Write(
      "[kafka-properties]\norders = \"/etc/delayd/orders.properties\"\n"
      "pay = \"/etc/delayd/pay.properties\"\n");
  ParsedArgs a = Parse({"--config", p});
  ASSERT_FALSE(a.exit);
  EXPECT_EQ(a.config.kafka_properties, (Files{{"orders", "/etc/delayd/orders.properties"},
                                              {"pay", "/etc/delayd/pay.properties"}}));
  a = Parse({"--config", p, "--kafka-properties", "x=/x.properties", "--kafka-properties",
             "y=/y=.properties"});
  ASSERT_FALSE(a.exit);
  EXPECT_EQ(a.config.kafka_properties, (Files{{"x", "/x.properties"}, {"y", "/y=.properties"}}));
  EXPECT_TRUE(Parse({"--kafka-properties", "x"}).exit) << "no file";
  EXPECT_TRUE(Parse({"--kafka-properties", "bad name=/f"}).exit);
  EXPECT_TRUE(Parse({"--kafka-properties", "x=/a", "--kafka-properties", "x=/b"}).exit)
      << "one name, two files";
  Config c;
  EXPECT_FALSE(LoadToml(Write("kafka-properties = \"/f\"\n"), c).ok()) << "not a table";
  EXPECT_FALSE(LoadToml(Write("[kafka-properties]\nx = 1\n"), c).ok());
  EXPECT_FALSE(LoadToml(Write("[kafka-properties]\n\"a/b\" = \"/f\"\n"), c).ok());
}

TEST_F(TomlTest, UnknownKeyIsAnError) {
  Config c;
  Status s = LoadToml(Write("data_dir = \"x\"\n"), c);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("unknown key 'data_dir'"), std::string::npos) << s.message();
}

TEST_F(TomlTest, WrongTypeIsAnError) {
  Config c;
  EXPECT_FALSE(LoadToml(Write("max-job-size = \"big\"\n"), c).ok());
  EXPECT_FALSE(LoadToml(Write("max-job-size = -5\n"), c).ok());
  EXPECT_FALSE(LoadToml(Write("this is not toml"), c).ok());
  EXPECT_FALSE(LoadToml(Write("log-level = \"loud\"\n"), c).ok());
  EXPECT_FALSE(LoadToml(Write("sync-delay-ms = 5000\n"), c).ok());
  EXPECT_TRUE(LoadToml(Write("sync-delay-ms = 0\n"), c).ok());
  EXPECT_EQ(c.sync_delay_ms, 0);
  EXPECT_EQ(c.max_job_size, 65535u) << "a failed load changes nothing it did not reach";
}

}  // namespace
}  // namespace delayd::server
