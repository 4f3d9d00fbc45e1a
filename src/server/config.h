// Config: what the delayd binary is told, from flags and an optional TOML file
// (flags win). beanstalkd's own flags are accepted too, so delayd can replace
// beanstalkd by changing only the binary's name.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/version.h"
#include "engine/spec.h"
#include "http/access.h"
#include "store/store.h"

namespace delayd::server {

struct Config {
  std::string data_dir = "./data";
  // A PostgreSQL connection string or postgres:// URI; empty: SQLite in data_dir.
  std::string store;
  // Cluster mode (doc/cluster.md): nodes on one PostgreSQL share its queue.
  bool cluster = false;
  std::string node_id;      // empty: "<hostname>:<first beanstalk port>"
  int64_t lease_ms = 3000;  // a shard's lease; a dead node's shards move within it
  std::vector<std::string> beanstalk = {"127.0.0.1:11300"};
  uint64_t max_job_size = engine::kDefaultMaxJobBytes;
  uint64_t max_connections = 10000;
  int64_t horizon_ms = 60'000;
  // Ready jobs of each kind and buried jobs held in memory per tube; the
  // rest wait in the store (doc/engine.md, "Windows"). 0: all in memory.
  uint64_t ready_window = 4096;
  std::string log_level = "info";
  std::string http = "127.0.0.1:8080";  // "off": no HTTP API
  std::string grpc = "off";             // HOST:PORT: the gRPC API (doc/grpc.md)
  // Bearer tokens (http/access.h; none: /v1 routes are open), each with a
  // scope: admin, write or read. One of each scope from its flag, its file
  // flag (the file's first line) or the environment (DELAYD_API_TOKEN,
  // DELAYD_API_WRITE_TOKEN, DELAYD_API_READ_TOKEN), so that it need not show
  // in `ps`; any number from `api_tokens_file` ("SCOPE TOKEN" lines).
  // LoadTokens gathers them, at start and on SIGHUP.
  std::string api_token;  // admin
  std::string api_token_file;
  std::string api_write_token;
  std::string api_write_token_file;
  std::string api_read_token;
  std::string api_read_token_file;
  std::string api_tokens_file;
  // TLS on the HTTP and gRPC listeners (PEM files; empty: plain). The HTTP
  // listener reads them again on SIGHUP; a client CA asks every client for
  // a certificate it signed (mTLS).
  std::string tls_cert;
  std::string tls_key;
  std::string tls_client_ca;
  // Pages of these origins may call the API besides its own (CSRF defence).
  std::vector<std::string> http_allow_origin;
  // Host names a loopback HTTP listener answers besides loopback ones (DNS
  // rebinding defence).
  std::vector<std::string> http_allowed_hosts;
  uint64_t metrics_topics = 100;  // topics with series of their own on /metrics
  bool metrics_auth = false;      // /metrics needs a token too (any scope)
  std::string console = "on";     // the web console: on, read-only or off
  uint64_t max_batch = 1000;      // jobs per HTTP submission
  uint64_t max_request_bytes = 16 << 20;
  int64_t done_retention_ms = 3'600'000;
  uint64_t max_deliveries = 4096;           // push deliveries in flight at once
  uint64_t topic_concurrency = 128;         // ... for one topic without its own max_concurrency
  int64_t timer_misfire_grace_ms = 60'000;  // a timer fire later than this is missed
  // How long a finish, release or bury may wait for its disk sync after its
  // reply (store::Durability::kWritten); 0: every change is synced first.
  int64_t sync_delay_ms = store::kDefaultSyncDelayMs;
  // Push targets and alert webhooks: rules of delivery/target_policy.h.
  std::vector<std::string> target_allow;
  std::vector<std::string> target_deny;
  // Kafka properties files by NAME (brokers/kafka_properties.h), which Kafka
  // targets pick with ?properties=NAME; re-read on SIGHUP.
  std::map<std::string, std::string> kafka_properties;
};

// The outcome of reading the command line: run with `config`, or exit with
// `exit_code` after `message` has been printed (help, version, errors).
struct ParsedArgs {
  Config config;
  bool exit = false;
  int exit_code = 0;
};

ParsedArgs ParseArgs(int argc, char** argv);

// The tokens the server accepts: the flags, the files they name (read now)
// and, for a scope given neither way, the environment (`getenv`). Errors
// name the file and line or the conflict, never a token.
Result<http::Tokens> LoadTokens(const Config& config, char* (*getenv)(const char*));

// Reads a TOML file's keys into `config`, leaving keys it lacks alone.
// Unknown keys and wrong types are errors.
Status LoadToml(const std::string& path, Config& config);

}  // namespace delayd::server
