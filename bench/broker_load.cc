// Push delivery into brokers (issue 32), loopback only, stopping by itself:
//
//   broker_load kafka --port P [--jobs 100000] [--lead-ms 5000] [--spread-ms 1000]
//       [--concurrency N]
//       starts librdkafka's mock cluster (3 brokers, a topic of 6
//       partitions) in this process and a consumer reading it
//   broker_load amqp --port P --uri amqp://... [--jobs 100000] [--lead-ms 5000] [--spread-ms 1000]
//       [--concurrency N]
//       declares a durable direct exchange and a durable queue on that
//       RabbitMQ (scripts/rabbitmq-temp) and consumes it (no acks)
//
// Each then submits push jobs targeting the broker to delayd at P, due
// `lead-ms` from now and spread evenly over `spread-ms` (a second; 0 makes
// them all due at one instant, which measures how fast delayd can go), and
// prints delivered/s (first to last arrival at the consumer) and lateness
// p50/p99/max (arrival minus the Delayd-Due-At header), with the CPU steal
// over the delivery window, in the format of `http_load deliver`.
#include <amqp.h>
#include <amqp_framing.h>
#include <amqp_tcp_socket.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/amqp_url.h"
#include "common/time_format.h"
#include "load_http.h"
#include "load_util.h"

using namespace std::chrono;
using namespace delayd::bench;

namespace {

int64_t WallUs() {
  return duration_cast<microseconds>(system_clock::now().time_since_epoch()).count();
}

// What a consumer saw, shared with the main thread.
class Hits {
 public:
  void Add(int64_t at_us, std::string_view due) {
    const int64_t due_ms = delayd::ParseRfc3339(due).value_or(0);
    std::lock_guard lock(mu_);
    hits_.push_back({at_us, due_ms});
    count_ = hits_.size();
  }
  size_t count() const { return count_; }
  std::vector<Hit> hits() {
    std::lock_guard lock(mu_);
    return hits_;
  }

 private:
  std::atomic<size_t> count_{0};
  std::mutex mu_;
  std::vector<Hit> hits_;
};

// librdkafka's mock cluster and a consumer of its topic "jobs".
class KafkaSide {
 public:
  KafkaSide() {
    char err[512];
    rd_kafka_conf_t* conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "log_level", "3", err, sizeof err);
    mock_rk_ = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    cluster_ = rd_kafka_mock_cluster_new(mock_rk_, 3);
    bootstrap_ = rd_kafka_mock_cluster_bootstraps(cluster_);
    rd_kafka_mock_topic_create(cluster_, "jobs", kPartitions, 3);
    conf = rd_kafka_conf_new();
    const std::pair<const char*, const char*> settings[] = {
        {"bootstrap.servers", bootstrap_.c_str()},
        {"group.id", "bench"},
        {"fetch.wait.max.ms", "5"},
        {"enable.auto.commit", "false"},
        {"log_level", "3"},
    };
    for (const auto& [k, v] : settings) rd_kafka_conf_set(conf, k, v, err, sizeof err);
    consumer_ = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
    rd_kafka_poll_set_consumer(consumer_);
    rd_kafka_topic_partition_list_t* parts = rd_kafka_topic_partition_list_new(kPartitions);
    for (int p = 0; p < kPartitions; ++p) {
      rd_kafka_topic_partition_list_add(parts, "jobs", p)->offset = RD_KAFKA_OFFSET_BEGINNING;
    }
    rd_kafka_assign(consumer_, parts);
    rd_kafka_topic_partition_list_destroy(parts);
    thread_ = std::thread([this] { Run(); });
  }
  ~KafkaSide() {
    stopping_ = true;
    thread_.join();
    rd_kafka_consumer_close(consumer_);
    rd_kafka_destroy(consumer_);
    rd_kafka_mock_cluster_destroy(cluster_);
    rd_kafka_destroy(mock_rk_);
  }
  std::string url() const { return "kafka://" + bootstrap_ + "/jobs"; }
  Hits& hits() { return hits_; }

 private:
  static constexpr int kPartitions = 6;
  void Run() {
    while (!stopping_) {
      rd_kafka_message_t* m = rd_kafka_consumer_poll(consumer_, 50);
      if (m == nullptr) continue;
      if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        rd_kafka_headers_t* h = nullptr;
        const void* v = nullptr;
        size_t n = 0;
        if (rd_kafka_message_headers(m, &h) == RD_KAFKA_RESP_ERR_NO_ERROR &&
            rd_kafka_header_get_last(h, "Delayd-Due-At", &v, &n) == RD_KAFKA_RESP_ERR_NO_ERROR) {
          hits_.Add(WallUs(), std::string_view(static_cast<const char*>(v), n));
        }
      }
      rd_kafka_message_destroy(m);
    }
  }
  rd_kafka_t* mock_rk_ = nullptr;
  rd_kafka_mock_cluster_t* cluster_ = nullptr;
  rd_kafka_t* consumer_ = nullptr;
  std::string bootstrap_;
  Hits hits_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

// A consumer of a durable queue "bench" bound to the durable direct exchange
// "bench" by "due" on a RabbitMQ.
class AmqpSide {
 public:
  explicit AmqpSide(const std::string& uri) : uri_(uri) {
    std::optional<delayd::AmqpUrl> u = delayd::ParseAmqpUrl(uri + "?exchange=bench");
    if (!u) {
      fprintf(stderr, "bad --uri %s\n", uri.c_str());
      exit(1);
    }
    conn_ = amqp_new_connection();
    amqp_socket_t* s = amqp_tcp_socket_new(conn_);
    if (amqp_socket_open(s, u->host.c_str(), u->port) != AMQP_STATUS_OK ||
        amqp_login(conn_, u->vhost.c_str(), 0, 131072, 0, AMQP_SASL_METHOD_PLAIN, u->user.c_str(),
                   u->password.c_str())
                .reply_type != AMQP_RESPONSE_NORMAL) {
      fprintf(stderr, "cannot connect to %s\n", uri.c_str());
      exit(1);
    }
    amqp_channel_open(conn_, 1);
    amqp_exchange_declare(conn_, 1, amqp_cstring_bytes("bench"), amqp_cstring_bytes("direct"), 0,
                          /*durable=*/1, 0, 0, amqp_empty_table);
    amqp_queue_declare(conn_, 1, amqp_cstring_bytes("bench"), 0, /*durable=*/1, 0, 0,
                       amqp_empty_table);
    amqp_queue_bind(conn_, 1, amqp_cstring_bytes("bench"), amqp_cstring_bytes("bench"),
                    amqp_cstring_bytes("due"), amqp_empty_table);
    amqp_basic_consume(conn_, 1, amqp_cstring_bytes("bench"), amqp_empty_bytes, 0, /*no_ack=*/1, 0,
                       amqp_empty_table);
    if (amqp_get_rpc_reply(conn_).reply_type != AMQP_RESPONSE_NORMAL) {
      fprintf(stderr, "cannot set up the queue on %s\n", uri.c_str());
      exit(1);
    }
    thread_ = std::thread([this] { Run(); });
  }
  ~AmqpSide() {
    stopping_ = true;
    thread_.join();
    amqp_channel_close(conn_, 1, AMQP_REPLY_SUCCESS);
    amqp_connection_close(conn_, AMQP_REPLY_SUCCESS);
    amqp_destroy_connection(conn_);
  }
  std::string url() const { return uri_ + "?exchange=bench&routing_key=due"; }
  Hits& hits() { return hits_; }

 private:
  void Run() {
    while (!stopping_) {
      amqp_envelope_t env;
      timeval wait{.tv_sec = 0, .tv_usec = 50'000};
      amqp_maybe_release_buffers(conn_);
      amqp_rpc_reply_t r = amqp_consume_message(conn_, &env, &wait, 0);
      if (r.reply_type != AMQP_RESPONSE_NORMAL) continue;  // a timeout
      const amqp_table_t& h = env.message.properties.headers;
      for (int i = 0; i < h.num_entries; ++i) {
        const amqp_table_entry_t& e = h.entries[i];
        if (e.key.len == 13 && memcmp(e.key.bytes, "Delayd-Due-At", 13) == 0) {
          hits_.Add(WallUs(), std::string_view(static_cast<const char*>(e.value.value.bytes.bytes),
                                               e.value.value.bytes.len));
        }
      }
      amqp_destroy_envelope(&env);
    }
  }
  std::string uri_;
  amqp_connection_state_t conn_ = nullptr;
  Hits hits_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

template <class Side>
int Deliver(Side& side, int argc, char** argv) {
  const int port = static_cast<int>(Arg(argc, argv, "--port", 0));
  const long jobs = Arg(argc, argv, "--jobs", 100000);
  const long lead_ms = Arg(argc, argv, "--lead-ms", 5000);
  const long spread_ms = Arg(argc, argv, "--spread-ms", 1000);
  const long concurrency = Arg(argc, argv, "--concurrency", 0);
  PutTopic(port, "push",
           "{\"target\":{\"url\":\"" + side.url() + "\"}" +
               (concurrency ? ",\"max_concurrency\":" + std::to_string(concurrency) : "") + "}");
  const int64_t base =
      duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count() + lead_ms;
  const double submit_rate = Post(port, "/v1/topics/push/jobs", jobs, 1000, 4, [&](long i) {
    return "{\"run_at\":\"" + delayd::FormatRfc3339Ms(base + i * spread_ms / jobs) +
           "\",\"body\":" + std::to_string(i) + "}";
  });
  const double steal_pct = WaitForDeliveries([&] { return side.hits().count(); }, jobs, base);
  if (steal_pct < 0) return 1;
  PrintDelivery(jobs, submit_rate, Measure(side.hits().hits()), steal_pct);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "kafka" && Arg(argc, argv, "--port", 0) != 0) {
    KafkaSide side;
    return Deliver(side, argc, argv);
  }
  if (mode == "amqp" && Arg(argc, argv, "--port", 0) != 0 && ArgText(argc, argv, "--uri")) {
    AmqpSide side(ArgText(argc, argv, "--uri"));
    return Deliver(side, argc, argv);
  }
  fprintf(stderr,
          "usage: broker_load kafka|amqp --port P [--uri amqp://...] [--jobs N] [--lead-ms M] "
          "[--spread-ms S] [--concurrency N]\n");
  return 2;
}
