#include "server/config.h"

#include <toml++/toml.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <fstream>
#include <iostream>
#include <set>

#include "brokers/kafka_properties.h"

namespace delayd::server {

namespace {
// A sync delay longer than this would put more than a second of finished work
// at the mercy of a power cut.
constexpr int64_t kMaxSyncDelayMs = 1000;
// Leases are renewed every third of their length, each renewal a database
// round trip: shorter than this would renew faster than a slow database
// answers.
constexpr int64_t kMinLeaseMs = 300;
const std::vector<std::string> kLogLevels = {"trace", "debug", "info", "warn", "error", "off"};
bool ValidLogLevel(const std::string& l) {
  return std::find(kLogLevels.begin(), kLogLevels.end(), l) != kLogLevels.end();
}
}  // namespace

Status LoadToml(const std::string& path, Config& config) {
  toml::table t;
  try {
    t = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    return Status::InvalidArgument(path + ": " + std::string(e.description()));
  }
  static const std::set<std::string> kKnown = {"data-dir",
                                               "store",
                                               "cluster",
                                               "node-id",
                                               "lease-ms",
                                               "beanstalk",
                                               "max-job-size",
                                               "max-connections",
                                               "horizon-ms",
                                               "ready-window",
                                               "log-level",
                                               "http",
                                               "grpc",
                                               "api-token",
                                               "api-token-file",
                                               "api-write-token",
                                               "api-write-token-file",
                                               "api-read-token",
                                               "api-read-token-file",
                                               "api-tokens-file",
                                               "tls-cert",
                                               "tls-key",
                                               "tls-client-ca",
                                               "http-allow-origin",
                                               "http-allowed-hosts",
                                               "metrics-topics",
                                               "metrics-auth",
                                               "console",
                                               "max-batch",
                                               "max-request-bytes",
                                               "done-retention-ms",
                                               "max-deliveries",
                                               "topic-concurrency",
                                               "timer-misfire-grace-ms",
                                               "target-allow",
                                               "target-deny",
                                               "kafka-properties",
                                               "sync-delay-ms"};
  for (auto& [key, value] : t) {
    if (!kKnown.count(std::string(key.str()))) {
      return Status::InvalidArgument(path + ": unknown key '" + std::string(key.str()) + "'");
    }
  }
  auto type_error = [&](const char* key, const char* want) {
    return Status::InvalidArgument(path + ": '" + key + "' must be " + want);
  };
  if (auto n = t["data-dir"]; n) {
    if (!n.is_string()) return type_error("data-dir", "a string");
    config.data_dir = *n.value<std::string>();
  }
  if (auto n = t["store"]; n) {
    if (!n.is_string()) return type_error("store", "a string");
    config.store = *n.value<std::string>();
  }
  if (auto n = t["cluster"]; n) {
    if (!n.is_boolean()) return type_error("cluster", "true or false");
    config.cluster = *n.value<bool>();
  }
  if (auto n = t["metrics-auth"]; n) {
    if (!n.is_boolean()) return type_error("metrics-auth", "true or false");
    config.metrics_auth = *n.value<bool>();
  }
  if (auto n = t["node-id"]; n) {
    if (!n.is_string()) return type_error("node-id", "a string");
    config.node_id = *n.value<std::string>();
  }
  if (auto n = t["beanstalk"]; n) {
    config.beanstalk.clear();
    if (n.is_string()) {
      config.beanstalk.push_back(*n.value<std::string>());
    } else if (auto* arr = n.as_array()) {
      for (auto& el : *arr) {
        if (!el.is_string()) return type_error("beanstalk", "a string or an array of strings");
        config.beanstalk.push_back(*el.value<std::string>());
      }
    } else {
      return type_error("beanstalk", "a string or an array of strings");
    }
  }
  auto integer = [&](const char* key, auto& out, int64_t min) -> Status {
    if (auto n = t[key]; n) {
      auto v = n.value<int64_t>();
      if (!n.is_integer() || !v || *v < min) return type_error(key, "a non-negative integer");
      out = static_cast<std::remove_reference_t<decltype(out)>>(*v);
    }
    return Status::Ok();
  };
  if (Status s = integer("max-job-size", config.max_job_size, 0); !s.ok()) return s;
  if (Status s = integer("max-connections", config.max_connections, 1); !s.ok()) return s;
  if (Status s = integer("horizon-ms", config.horizon_ms, 1000); !s.ok()) return s;
  if (Status s = integer("ready-window", config.ready_window, 0); !s.ok()) return s;
  if (Status s = integer("lease-ms", config.lease_ms, kMinLeaseMs); !s.ok()) return s;
  if (Status s = integer("max-batch", config.max_batch, 1); !s.ok()) return s;
  if (Status s = integer("max-request-bytes", config.max_request_bytes, 1024); !s.ok()) return s;
  if (Status s = integer("done-retention-ms", config.done_retention_ms, 0); !s.ok()) return s;
  if (Status s = integer("max-deliveries", config.max_deliveries, 1); !s.ok()) return s;
  if (Status s = integer("topic-concurrency", config.topic_concurrency, 1); !s.ok()) return s;
  if (Status s = integer("timer-misfire-grace-ms", config.timer_misfire_grace_ms, 0); !s.ok()) {
    return s;
  }
  if (Status s = integer("sync-delay-ms", config.sync_delay_ms, 0); !s.ok()) return s;
  if (config.sync_delay_ms > kMaxSyncDelayMs) {
    return type_error("sync-delay-ms",
                      ("an integer from 0 to " + std::to_string(kMaxSyncDelayMs)).c_str());
  }
  if (auto n = t["console"]; n) {
    const auto v = n.value<std::string>();
    if (!v || (*v != "on" && *v != "read-only" && *v != "off")) {
      return type_error("console", "\"on\", \"read-only\" or \"off\"");
    }
    config.console = *v;
  }
  if (Status s = integer("metrics-topics", config.metrics_topics, 0); !s.ok()) return s;
  for (auto [key, out] : {std::pair{"http", &config.http},
                          {"grpc", &config.grpc},
                          {"api-token", &config.api_token},
                          {"api-token-file", &config.api_token_file},
                          {"api-write-token", &config.api_write_token},
                          {"api-write-token-file", &config.api_write_token_file},
                          {"api-read-token", &config.api_read_token},
                          {"api-read-token-file", &config.api_read_token_file},
                          {"api-tokens-file", &config.api_tokens_file},
                          {"tls-cert", &config.tls_cert},
                          {"tls-key", &config.tls_key},
                          {"tls-client-ca", &config.tls_client_ca}}) {
    if (auto n = t[key]; n) {
      if (!n.is_string()) return type_error(key, "a string");
      *out = *n.value<std::string>();
    }
  }
  for (auto [key, out] : {std::pair{"target-allow", &config.target_allow},
                          {"target-deny", &config.target_deny},
                          {"http-allow-origin", &config.http_allow_origin},
                          {"http-allowed-hosts", &config.http_allowed_hosts}}) {
    if (auto n = t[key]; n) {
      out->clear();
      auto* arr = n.as_array();
      if (n.is_string()) {
        out->push_back(*n.value<std::string>());
      } else if (arr != nullptr) {
        for (auto& el : *arr) {
          if (!el.is_string()) return type_error(key, "a string or an array of strings");
          out->push_back(*el.value<std::string>());
        }
      } else {
        return type_error(key, "a string or an array of strings");
      }
    }
  }
  if (auto n = t["kafka-properties"]; n) {
    const toml::table* files = n.as_table();
    if (files == nullptr) return type_error("kafka-properties", "a table of NAME = \"FILE\"");
    config.kafka_properties.clear();
    for (auto& [name, file] : *files) {
      if (!file.is_string()) return type_error("kafka-properties", "a table of NAME = \"FILE\"");
      auto flag =
          brokers::ParsePropertiesFlag(std::string(name.str()) + "=" + *file.value<std::string>());
      if (!flag.ok()) return Status::InvalidArgument(path + ": " + flag.status().message());
      config.kafka_properties.insert(std::move(*flag));
    }
  }
  if (auto n = t["log-level"]; n) {
    if (!n.is_string() || !ValidLogLevel(*n.value<std::string>())) {
      return type_error("log-level", "one of trace, debug, info, warn, error, off");
    }
    config.log_level = *n.value<std::string>();
  }
  return Status::Ok();
}

ParsedArgs ParseArgs(int argc, char** argv) {
  ParsedArgs out;
  Config& c = out.config;
  CLI::App app{
      "delayd: a durable delayed-job and timer service.\n"
      "Speaks the beanstalkd 1.12 protocol and an HTTP/JSON API, delivers push jobs\n"
      "to their HTTP targets with retries, keeps every job in an embedded store\n"
      "(SQLite in --data-dir) or in PostgreSQL (--store), and answers a put only\n"
      "after it is on disk."};
  app.set_version_flag("--version,-v", std::string("delayd ") + kVersion);

  std::string config_path;
  std::vector<std::string> beanstalk;
  std::string listen_addr;
  int port = -1;
  bool verbose = false;
  std::string binlog_dir;
  int64_t fsync_ms = -1;
  bool never_fsync = false;
  uint64_t binlog_size = 0;

  app.add_option("--config", config_path, "Read settings from this TOML file (flags win)")
      ->check(CLI::ExistingFile);
  app.add_option("--data-dir", c.data_dir, "Directory of the SQLite store (default ./data)");
  app.add_option("--store", c.store,
                 "Keep jobs in PostgreSQL: a libpq connection string or postgres:// URI "
                 "(password from PGPASSWORD or ~/.pgpass); without it, SQLite in --data-dir");
  app.add_flag("--cluster", c.cluster,
               "Share the PostgreSQL of --store with other delayd nodes: any node serves any "
               "client, shards' clocks move to a live node when one stops (doc/cluster.md)");
  app.add_option("--node-id", c.node_id,
                 "This node's name in the cluster (default HOSTNAME:PORT of the first "
                 "--beanstalk address)");
  app.add_option("--lease-ms", c.lease_ms,
                 "Cluster: how long a node owns a shard without renewing; a node that dies is "
                 "replaced within about this long (default 3000)")
      ->check(CLI::Range(kMinLeaseMs, int64_t{600'000}));
  app.add_option("--beanstalk", beanstalk,
                 "Serve the beanstalk protocol on HOST:PORT or unix:PATH; repeatable; "
                 "port 0 picks a free port (default 127.0.0.1:11300)");
  app.add_option(
      "--max-job-size", c.max_job_size,
      "Largest job body in bytes (default " + std::to_string(engine::kDefaultMaxJobBytes) + ")");
  app.add_option("--max-connections", c.max_connections,
                 "Most simultaneous beanstalk connections (default 10000)");
  app.add_option("--horizon-ms", c.horizon_ms,
                 "Delayed jobs due within this many ms are held in memory (default 60000)")
      ->check(CLI::Range(int64_t{1000}, int64_t{86'400'000}));
  app.add_option("--ready-window", c.ready_window,
                 "Ready jobs of each kind and buried jobs held in memory per tube; the rest wait "
                 "on disk, read back in order (default 4096; 0: all in memory)")
      ->check(CLI::Range(uint64_t{0}, uint64_t{1} << 30));
  app.add_option("--http", c.http,
                 "Serve the HTTP API on HOST:PORT; port 0 picks a free port; \"off\" disables it "
                 "(default 127.0.0.1:8080)");
  app.add_option("--grpc", c.grpc,
                 "Serve the gRPC API (delayd.v1 Jobs, Topics, Timers, health, reflection) on "
                 "HOST:PORT; port 0 picks a free port (default off)");
  app.add_option("--api-token", c.api_token,
                 "Require \"Authorization: Bearer TOKEN\" on every /v1 route; this token is "
                 "admin: it may do everything (default: no token, the API is open; also "
                 "--api-token-file or DELAYD_API_TOKEN, which ps does not show)");
  app.add_option("--api-token-file", c.api_token_file,
                 "Read the admin token from this file's first line; re-read on SIGHUP");
  app.add_option("--api-write-token", c.api_write_token,
                 "A token that may submit, reserve and settle, cancel, edit and act on jobs, run "
                 "bulk actions and manage timers, but not change a topic's settings or pause it "
                 "(also --api-write-token-file or DELAYD_API_WRITE_TOKEN)");
  app.add_option("--api-write-token-file", c.api_write_token_file,
                 "Read the write token from this file's first line; re-read on SIGHUP");
  app.add_option("--api-read-token", c.api_read_token,
                 "A token that may only read: GET routes and the console's pages, without its "
                 "actions (also --api-read-token-file or DELAYD_API_READ_TOKEN)");
  app.add_option("--api-read-token-file", c.api_read_token_file,
                 "Read the read token from this file's first line; re-read on SIGHUP");
  app.add_option("--api-tokens-file", c.api_tokens_file,
                 "Any number of tokens, one \"SCOPE TOKEN\" a line (SCOPE admin, write or read; "
                 "'#' starts a comment line); re-read on SIGHUP");
  app.add_option("--tls-cert", c.tls_cert,
                 "Serve the HTTP API, the console and the gRPC API over TLS (1.2 and newer) with "
                 "this PEM certificate chain; with --tls-key. Re-read on SIGHUP (HTTP; gRPC at "
                 "restart); plain HTTP on the port gets its connection closed");
  app.add_option("--tls-key", c.tls_key, "The PEM private key of --tls-cert");
  app.add_option("--tls-client-ca", c.tls_client_ca,
                 "Ask every HTTP and gRPC client for a certificate signed by this PEM CA (mTLS); "
                 "one without is refused at the handshake");
  app.add_option("--http-allow-origin", c.http_allow_origin,
                 "Web pages of this origin (https://ops.example.com) may call the API; "
                 "repeatable. Requests from any other page's origin are refused (default: none "
                 "but the server's own)")
      ->take_all()
      ->allow_extra_args(false);
  app.add_option("--http-allowed-hosts", c.http_allowed_hosts,
                 "A loopback HTTP listener answers these Host names too; repeatable (default: "
                 "loopback names and addresses only, against DNS rebinding)")
      ->take_all()
      ->allow_extra_args(false);
  app.add_option("--metrics-topics", c.metrics_topics,
                 "Topics with series of their own on /metrics, those with the largest backlog; "
                 "the rest are summed under topic=\"_other\" (default 100)")
      ->check(CLI::Range(uint64_t{0}, uint64_t{100'000}));
  app.add_option("--console", c.console,
                 "The web console at / on the HTTP port: on, read-only (no actions) or off "
                 "(default on)")
      ->check(CLI::IsMember({"on", "read-only", "off"}));
  app.add_flag("--metrics-auth", c.metrics_auth,
               "Require a token (any scope) on /metrics too (default: /metrics is open)");
  app.add_option("--max-batch", c.max_batch, "Most jobs in one HTTP submission (default 1000)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{100'000}));
  app.add_option("--max-request-bytes", c.max_request_bytes,
                 "Largest HTTP request body in bytes (default 16777216)")
      ->check(CLI::Range(uint64_t{1024}, uint64_t{1} << 30));
  app.add_option("--done-retention-ms", c.done_retention_ms,
                 "How long finished jobs with a key, target or attempts stay readable as done "
                 "and keep their key taken (default 3600000)")
      ->check(CLI::Range(int64_t{0}, int64_t{365} * 86'400'000));
  app.add_option("--max-deliveries", c.max_deliveries,
                 "Most push deliveries in flight at once (default 4096)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1'000'000}));
  app.add_option("--topic-concurrency", c.topic_concurrency,
                 "Most deliveries in flight for one topic whose settings set no max_concurrency "
                 "(default 128)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1'000'000}));
  app.add_option("--timer-misfire-grace-ms", c.timer_misfire_grace_ms,
                 "A timer fire later than this (after downtime or a pause) counts as missed and "
                 "follows the timer's misfire policy (default 60000)")
      ->check(CLI::Range(int64_t{0}, int64_t{86'400'000}));
  app.add_option("--sync-delay-ms", c.sync_delay_ms,
                 "A delete, release or bury of a reserved job is answered once written to the "
                 "operating system and synced to disk within this many ms; a power cut can "
                 "bring back the last ones (at-least-once). 0 syncs every change before its "
                 "reply (default 10)")
      ->check(CLI::Range(int64_t{0}, kMaxSyncDelayMs));
  app.add_option("--target-allow", c.target_allow,
                 "Push targets and alert webhooks may only reach what matches one of these "
                 "rules; repeatable (default: anything not denied). A rule is HOST[:PORT]: *, "
                 "a host name, *.domain, an IP address or CIDR ([v6]/n:PORT with a port)")
      ->take_all()
      ->allow_extra_args(false);  // one rule per flag; "[::1]" is a rule, not a list
  app.add_option("--target-deny", c.target_deny,
                 "Push targets and alert webhooks may not reach what matches one of these "
                 "rules; repeatable. Link-local and unspecified addresses are always denied")
      ->take_all()
      ->allow_extra_args(false);  // one rule per flag; "[::1]" is a rule, not a list
  std::vector<std::string> kafka_properties;
  app.add_option("--kafka-properties", kafka_properties,
                 "NAME=FILE: librdkafka settings (TLS, SASL; key=value lines, ${VAR} from the "
                 "environment) for Kafka targets that name them (kafka://B/TOPIC?properties=NAME); "
                 "repeatable; re-read on SIGHUP (doc/brokers.md)")
      ->take_all()
      ->allow_extra_args(false);
  app.add_option("--log-level", c.log_level,
                 "trace, debug, info, warn, error or off (default info)")
      ->check(CLI::IsMember(kLogLevels));

  auto* compat = "beanstalkd compatibility";
  app.add_option("-l", listen_addr, "beanstalkd: listen address (or unix:PATH)")->group(compat);
  app.add_option("-p", port, "beanstalkd: listen port")->group(compat)->check(CLI::Range(0, 65535));
  app.add_option("-z", c.max_job_size, "beanstalkd: max job size")->group(compat);
  app.add_option("-b", binlog_dir, "beanstalkd: binlog directory, taken as --data-dir")
      ->group(compat);
  app.add_flag("-V", verbose, "beanstalkd: more verbose logging")->group(compat);
  app.add_option("-f", fsync_ms,
                 "beanstalkd: fsync interval; ignored, delayd syncs puts before their reply "
                 "(see --sync-delay-ms)")
      ->group(compat);
  app.add_flag("-F", never_fsync,
               "beanstalkd: never fsync; ignored, delayd syncs puts before their reply")
      ->group(compat);
  app.add_option("-s", binlog_size, "beanstalkd: binlog file size; ignored")->group(compat);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    out.exit = true;
    out.exit_code = app.exit(e);
    return out;
  }

  if (!config_path.empty()) {
    Config file = c;
    if (Status s = LoadToml(config_path, file); !s.ok()) {
      std::cerr << "delayd: " << s.message() << "\n";
      out.exit = true;
      out.exit_code = 2;
      return out;
    }
    // Flags given on the command line win over the file.
    auto given = [&](const char* name) { return app.count(name) > 0; };
    if (!given("--data-dir") && !given("-b")) c.data_dir = file.data_dir;
    if (!given("--store")) c.store = file.store;
    if (!given("--cluster")) c.cluster = file.cluster;
    if (!given("--node-id")) c.node_id = file.node_id;
    if (!given("--lease-ms")) c.lease_ms = file.lease_ms;
    if (!given("--max-job-size") && !given("-z")) c.max_job_size = file.max_job_size;
    if (!given("--max-connections")) c.max_connections = file.max_connections;
    if (!given("--horizon-ms")) c.horizon_ms = file.horizon_ms;
    if (!given("--ready-window")) c.ready_window = file.ready_window;
    if (!given("--log-level")) c.log_level = file.log_level;
    if (!given("--http")) c.http = file.http;
    if (!given("--grpc")) c.grpc = file.grpc;
    if (!given("--api-token")) c.api_token = file.api_token;
    if (!given("--api-token-file")) c.api_token_file = file.api_token_file;
    if (!given("--api-write-token")) c.api_write_token = file.api_write_token;
    if (!given("--api-write-token-file")) c.api_write_token_file = file.api_write_token_file;
    if (!given("--api-read-token")) c.api_read_token = file.api_read_token;
    if (!given("--api-read-token-file")) c.api_read_token_file = file.api_read_token_file;
    if (!given("--api-tokens-file")) c.api_tokens_file = file.api_tokens_file;
    if (!given("--tls-cert")) c.tls_cert = file.tls_cert;
    if (!given("--tls-key")) c.tls_key = file.tls_key;
    if (!given("--tls-client-ca")) c.tls_client_ca = file.tls_client_ca;
    if (!given("--http-allow-origin")) c.http_allow_origin = file.http_allow_origin;
    if (!given("--http-allowed-hosts")) c.http_allowed_hosts = file.http_allowed_hosts;
    if (!given("--metrics-topics")) c.metrics_topics = file.metrics_topics;
    if (!given("--metrics-auth")) c.metrics_auth = file.metrics_auth;
    if (!given("--console")) c.console = file.console;
    if (!given("--max-batch")) c.max_batch = file.max_batch;
    if (!given("--max-request-bytes")) c.max_request_bytes = file.max_request_bytes;
    if (!given("--done-retention-ms")) c.done_retention_ms = file.done_retention_ms;
    if (!given("--max-deliveries")) c.max_deliveries = file.max_deliveries;
    if (!given("--topic-concurrency")) c.topic_concurrency = file.topic_concurrency;
    if (!given("--target-allow")) c.target_allow = file.target_allow;
    if (!given("--target-deny")) c.target_deny = file.target_deny;
    if (!given("--sync-delay-ms")) c.sync_delay_ms = file.sync_delay_ms;
    if (!given("--kafka-properties")) c.kafka_properties = file.kafka_properties;
    if (!given("--timer-misfire-grace-ms")) {
      c.timer_misfire_grace_ms = file.timer_misfire_grace_ms;
    }
    c.beanstalk = file.beanstalk;
  }
  if (!beanstalk.empty()) c.beanstalk = beanstalk;
  if (!listen_addr.empty() || port >= 0) {
    std::string host = listen_addr.empty() ? "127.0.0.1" : listen_addr;
    if (host.rfind("unix:", 0) == 0) {
      c.beanstalk = {host};
    } else {
      if (host.find(':') != std::string::npos && host.front() != '[') host = "[" + host + "]";
      c.beanstalk = {host + ":" + std::to_string(port >= 0 ? port : 11300)};
    }
  }
  if (!binlog_dir.empty()) c.data_dir = binlog_dir;
  if (!kafka_properties.empty()) c.kafka_properties.clear();
  for (const std::string& f : kafka_properties) {
    auto flag = brokers::ParsePropertiesFlag(f);
    if (!flag.ok() || !c.kafka_properties.insert(*flag).second) {
      std::cerr << "delayd: "
                << (flag.ok() ? "--kafka-properties names " + flag->first + " twice"
                              : flag.status().message())
                << "\n";
      out.exit = true;
      out.exit_code = 2;
      return out;
    }
  }
  if (c.cluster && c.store.empty()) {
    std::cerr << "delayd: --cluster needs --store (a PostgreSQL the nodes share)\n";
    out.exit = true;
    out.exit_code = 2;
    return out;
  }
  if (c.tls_cert.empty() != c.tls_key.empty() || (!c.tls_client_ca.empty() && c.tls_cert.empty())) {
    std::cerr << "delayd: TLS needs --tls-cert and --tls-key together (and --tls-client-ca "
                 "only with them)\n";
    out.exit = true;
    out.exit_code = 2;
    return out;
  }
  auto tokens = LoadTokens(c, &std::getenv);
  if (!tokens.ok()) {
    std::cerr << "delayd: " << tokens.status().message() << "\n";
    out.exit = true;
    out.exit_code = 2;
    return out;
  }
  if (c.metrics_auth && tokens->empty()) {
    std::cerr << "delayd: --metrics-auth needs an API token (the token /metrics asks for)\n";
    out.exit = true;
    out.exit_code = 2;
    return out;
  }
  if (verbose) c.log_level = "debug";
  return out;
}

namespace {
// The first line of `path`, without its line end.
Result<std::string> FirstLine(const std::string& path, const char* what) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) {
    return Status::InvalidArgument(std::string("cannot read the ") + what + " from " + path);
  }
  if (!line.empty() && line.back() == '\r') line.pop_back();
  if (line.empty())
    return Status::InvalidArgument(std::string("the ") + what + " file " + path + " is empty");
  return line;
}
}  // namespace

Result<http::Tokens> LoadTokens(const Config& c, char* (*getenv)(const char*)) {
  using http::Scope;
  struct Source {
    Scope scope;
    const std::string& flag;
    const std::string& file;
    const char* env;
    const char* flag_name;
  };
  http::Tokens tokens;
  for (const Source& src :
       {Source{Scope::kAdmin, c.api_token, c.api_token_file, "DELAYD_API_TOKEN", "--api-token"},
        Source{Scope::kWrite, c.api_write_token, c.api_write_token_file, "DELAYD_API_WRITE_TOKEN",
               "--api-write-token"},
        Source{Scope::kRead, c.api_read_token, c.api_read_token_file, "DELAYD_API_READ_TOKEN",
               "--api-read-token"}}) {
    const std::string what = std::string(http::ScopeName(src.scope)) + " token";
    std::string token = src.flag, from = src.flag_name;
    if (!src.file.empty()) {
      if (!token.empty()) {
        return Status::InvalidArgument("give the " + what + " as a flag or as a file, not both");
      }
      auto line = FirstLine(src.file, what.c_str());
      if (!line.ok()) return line.status();
      token = *line;
      from = src.file;
    } else if (const char* v = getenv(src.env); token.empty() && v != nullptr) {
      token = v;
      from = src.env;
    }
    if (token.empty()) continue;
    if (Status s = tokens.Add(src.scope, token, from); !s.ok()) return s;
  }
  if (!c.api_tokens_file.empty()) {
    constexpr std::streamsize kMaxBytes = 1 << 20;
    std::ifstream in(c.api_tokens_file, std::ios::binary);
    std::string text(kMaxBytes + 1, '\0');
    if (in) in.read(text.data(), kMaxBytes + 1);
    if (!in && !in.eof()) {
      return Status::InvalidArgument("cannot read the tokens file " + c.api_tokens_file);
    }
    text.resize(static_cast<size_t>(in.gcount()));
    if (text.size() > static_cast<size_t>(kMaxBytes)) {
      return Status::InvalidArgument("the tokens file " + c.api_tokens_file +
                                     " is larger than 1 MiB");
    }
    const size_t before = tokens.size();
    if (Status s = http::ParseTokensFile(text, c.api_tokens_file, &tokens); !s.ok()) return s;
    // An emptied file would open the API to everyone: refused, not obeyed.
    if (tokens.size() == before) {
      return Status::InvalidArgument("the tokens file " + c.api_tokens_file + " has no token");
    }
  }
  return tokens;
}

}  // namespace delayd::server
