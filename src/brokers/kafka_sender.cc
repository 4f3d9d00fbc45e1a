#include "brokers/kafka_sender.h"

#include <librdkafka/rdkafka.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <cerrno>

#include "brokers/c11_threads_tsan.h"  // under TSan only
#include "brokers/limits.h"
#include "common/kafka_url.h"
#include "common/thread_name.h"
#include "delivery/header_line.h"

namespace delayd::brokers {

using delivery::OutRequest;
using delivery::OutResult;

namespace {

constexpr int kStopFlushMs = 2000;  // Stop waits this long for purged records' reports

// Errors that no retry will cure: the cluster refused the record itself.
bool Rejected(rd_kafka_resp_err_t e) {
  switch (e) {
    case RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART:
    case RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC:
    case RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION:
    case RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE:
    case RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE:
    case RD_KAFKA_RESP_ERR_INVALID_RECORD:
    case RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION:
    case RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR_POLICY_VIOLATION:
      return true;
    default:
      return false;
  }
}

std::string ErrorText(rd_kafka_resp_err_t e) {
  return std::string(rd_kafka_err2name(e)) + ": " + rd_kafka_err2str(e);
}

// The host of a librdkafka broker name ("127.0.0.1:9092/1",
// "ssl://[::1]:9093/bootstrap").
std::string HostOfBrokerName(std::string_view name) {
  if (size_t scheme = name.find("://"); scheme != name.npos) name.remove_prefix(scheme + 3);
  name = name.substr(0, name.find('/'));
  if (!name.empty() && name.front() == '[') return std::string(name.substr(1, name.find(']') - 1));
  return std::string(name.substr(0, name.rfind(':')));
}

}  // namespace

// A record handed to librdkafka, until its delivery report.
struct Record {
  delivery::HttpSender::Callback done;
  std::string producer;  // its producer's key
  int64_t started_us = 0;
};

struct KafkaSender::Producer {
  KafkaSender* sender = nullptr;
  std::string key;
  std::string properties;   // the NAME it was made with ("": none) ...
  uint64_t generation = 0;  // ... and that NAME's settings then
  rd_kafka_t* rk = nullptr;
  std::thread poller;
  std::atomic<bool> stopping{false};
  int64_t used_us = 0;
  size_t in_flight = 0;  // on the loop: records not yet reported there

  std::mutex mu;
  std::string refusal;     // the target policy's last refusal of a connection
  std::string connection;  // librdkafka's last error of a connection (TLS, SASL, ...)
  std::atomic<bool> connection_failed{false};  // since the last record delivered

  // librdkafka's callbacks, on the poller thread (delivery reports) and on
  // librdkafka's broker threads (connections).
  static void OnDelivery(rd_kafka_t*, const rd_kafka_message_t* m, void* opaque);
  static int OnConnect(int fd, const sockaddr* addr, int addrlen, const char* id, void* opaque);
  static void OnLog(const rd_kafka_t* rk, int level, const char* fac, const char* text);
  static void OnError(rd_kafka_t* rk, int err, const char* reason, void* opaque);

  void Close() {
    stopping = true;
    if (poller.joinable()) poller.join();
    if (rk == nullptr) return;
    // Reports of purged records come through the queue: flush serves them
    // (and drops them, stopping being set), so no Record is left behind.
    rd_kafka_purge(rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
    rd_kafka_flush(rk, kStopFlushMs);
    rd_kafka_destroy(rk);
    rk = nullptr;
  }
};

void KafkaSender::Producer::OnDelivery(rd_kafka_t*, const rd_kafka_message_t* m, void* opaque) {
  auto* p = static_cast<Producer*>(opaque);
  // Shared: the executor's functions are copied.
  std::shared_ptr<Record> rec(static_cast<Record*>(m->_private));
  if (p->stopping) return;
  OutResult r;
  r.duration_ms = (p->sender->clock_.SteadyMicros() - rec->started_us) / 1000;
  if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
    r.broker = OutResult::Broker::kAcknowledged;
    if (p->connection_failed.exchange(false)) {
      std::lock_guard lock(p->mu);
      p->connection.clear();
    }
  } else {
    r.broker = Rejected(m->err) ? OutResult::Broker::kRejected : OutResult::Broker::kFailed;
    r.timed_out = m->err == RD_KAFKA_RESP_ERR__MSG_TIMED_OUT;
    r.error = ErrorText(m->err);
    if (r.broker == OutResult::Broker::kFailed) {
      // A record that could not reach the cluster says why, when the policy
      // is why; one the cluster rejected says only what the cluster said.
      std::lock_guard lock(p->mu);
      if (!p->refusal.empty()) {
        r.error = p->refusal + " (" + r.error + ")";
      } else if (!p->connection.empty()) {
        r.error += " (last connection error: " + p->connection + ")";
      }
    }
  }
  KafkaSender* s = p->sender;
  s->executor_([s, rec = std::move(rec), r = std::move(r)]() mutable {
    if (s->stopped_) return;
    if (auto it = s->producers_.find(rec->producer); it != s->producers_.end()) {
      --it->second->in_flight;
    }
    rec->done(std::move(r));
  });
}

int KafkaSender::Producer::OnConnect(int fd, const sockaddr* addr, int addrlen, const char* id,
                                     void* opaque) {
  auto* p = static_cast<Producer*>(opaque);
  Status s = p->sender->policy_.CheckAddress(HostOfBrokerName(id ? id : ""), addr);
  {
    std::lock_guard lock(p->mu);
    if (!s.ok()) {
      p->refusal = "refused by the target policy: " + s.message();
      return EACCES;
    }
  }
  // librdkafka's socket is non-blocking but a connect callback must finish
  // the connect: wait for it here, on the broker's own thread.
  if (connect(fd, addr, static_cast<socklen_t>(addrlen)) == 0) return 0;
  if (errno != EINPROGRESS) return errno;
  pollfd pfd{.fd = fd, .events = POLLOUT, .revents = 0};
  int n;
  do {
    n = poll(&pfd, 1, kConnectWaitMs);
  } while (n == -1 && errno == EINTR);
  if (n == 0) return ETIMEDOUT;
  if (n == -1) return errno;
  int so_error = 0;
  socklen_t len = sizeof so_error;
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &len) == -1) return errno;
  return so_error;
}

void KafkaSender::Producer::OnLog(const rd_kafka_t* rk, int level, const char* fac,
                                  const char* text) {
  // librdkafka's syslog levels: 3 error, 4 warning; the rest is chatter.
  if (level <= 4) spdlog::warn("kafka {} {}: {}", rd_kafka_name(rk), fac, text);
}

void KafkaSender::Producer::OnError(rd_kafka_t*, int err, const char* reason, void* opaque) {
  // Errors of the client itself: the cluster out of reach, a TLS handshake
  // or a SASL login that failed. Remembered for the records that time out.
  auto* p = static_cast<Producer*>(opaque);
  std::lock_guard lock(p->mu);
  p->connection = std::string(rd_kafka_err2name(static_cast<rd_kafka_resp_err_t>(err))) + ": " +
                  (reason ? reason : "");
  p->connection_failed = true;
}

KafkaSender::KafkaSender(Executor executor, const delivery::TargetPolicy& policy,
                         const Clock& clock)
    : executor_(std::move(executor)), policy_(policy), clock_(clock) {}

KafkaSender::~KafkaSender() { Stop(); }

void KafkaSender::Stop() {
  if (stopped_) return;
  stopped_ = true;
  for (auto& [key, p] : producers_) p->Close();
  producers_.clear();
}

void KafkaSender::Send(OutRequest req, Callback done) {
  if (stopped_) return;
  const int64_t now_us = clock_.SteadyMicros();
  DropIdle(now_us);
  const ParsedUrl& parsed = urls_.Get(req.url, [](std::string_view text) {
    ParsedUrl p;
    p.url = ParseKafkaUrl(text, &p.why);
    return p;
  });
  if (!parsed.url) {
    OutResult r;
    r.not_sent = true;
    r.error = "not sent: " + req.url.substr(0, 200) + " " + parsed.why;
    return Fail(std::move(done), std::move(r));
  }
  const KafkaUrl* url = &*parsed.url;
  const Properties* props = nullptr;
  if (!url->properties.empty()) {
    auto it = properties_.find(url->properties);
    if (it == properties_.end()) {
      // Accepted by a server started with the NAME: retried, so that a
      // restart with it back delivers.
      OutResult r;
      r.broker = OutResult::Broker::kFailed;
      r.error = "names Kafka properties " + url->properties +
                ", which this server does not have (--kafka-properties NAME=FILE)";
      return Fail(std::move(done), std::move(r));
    }
    props = &it->second;
  }
  const std::string key = url->bootstrap + "|" + url->properties + "#" +
                          std::to_string(props ? props->generation : 0) + "|" +
                          std::to_string(req.timeout_ms);
  std::unique_ptr<Producer>& slot = producers_[key];
  char fatal[512];
  if (slot && slot->in_flight == 0 &&
      rd_kafka_fatal_error(slot->rk, fatal, sizeof fatal) != RD_KAFKA_RESP_ERR_NO_ERROR) {
    // An idempotent producer that hit a fatal error (its sequence numbers
    // no longer trusted) fails every record from then on: once its own
    // records have been reported failed, it is replaced by a new one.
    spdlog::warn("kafka: producer for {} had a fatal error ({}); making a new one", url->bootstrap,
                 fatal);
    slot->Close();
    slot.reset();
  }
  if (!slot) {
    auto p = std::make_unique<Producer>();
    p->sender = this;
    p->key = key;
    p->properties = url->properties;
    p->generation = props ? props->generation : 0;
    rd_kafka_conf_t* conf = rd_kafka_conf_new();
    char err[512] = {};
    const std::string timeout = std::to_string(std::max<int64_t>(req.timeout_ms, 10));
    const std::pair<const char*, std::string> settings[] = {
        {"bootstrap.servers", url->bootstrap},
        {"enable.idempotence", "true"},
        {"linger.ms", req.timeout_ms > 50 ? "5" : "0"},
        {"client.id", "delayd"},
        // Never create a topic: an unknown one is the target's mistake.
        {"allow.auto.create.topics", "false"},
        {"topic.metadata.propagation.max.ms",
         std::to_string(std::min<int64_t>(req.timeout_ms / 2, 10'000))},
    };
    for (const auto& [name, value] : settings) {
      if (rd_kafka_conf_set(conf, name, value.c_str(), err, sizeof err) != RD_KAFKA_CONF_OK) break;
    }
    // Topic settings, which every topic this producer writes gets.
    rd_kafka_topic_conf_t* topic_conf = rd_kafka_topic_conf_new();
    const std::pair<const char*, std::string> topic_settings[] = {
        {"acks", "all"},
        {"message.timeout.ms", timeout},
    };
    for (const auto& [name, value] : topic_settings) {
      if (err[0] != '\0' || rd_kafka_topic_conf_set(topic_conf, name, value.c_str(), err,
                                                    sizeof err) != RD_KAFKA_CONF_OK) {
        break;
      }
    }
    rd_kafka_conf_set_default_topic_conf(conf, topic_conf);  // the conf's now
    // The properties file's, after delayd's own (linger.ms, client.id) and
    // the default topic configuration (compression.type goes there).
    for (const auto& [name, value] : props ? props->settings : KafkaSettings{}) {
      if (err[0] != '\0' || rd_kafka_conf_set(conf, name.c_str(), value.c_str(), err, sizeof err) !=
                                RD_KAFKA_CONF_OK) {
        break;
      }
    }
    rd_kafka_conf_set_dr_msg_cb(conf, &Producer::OnDelivery);
    rd_kafka_conf_set_connect_cb(conf, &Producer::OnConnect);
    rd_kafka_conf_set_log_cb(conf, &Producer::OnLog);
    rd_kafka_conf_set_error_cb(conf, &Producer::OnError);
    rd_kafka_conf_set_opaque(conf, p.get());
    if (err[0] == '\0') p->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    if (p->rk == nullptr) {
      rd_kafka_conf_destroy(conf);
      producers_.erase(key);
      // Retried: a properties file's certificate may be readable again.
      OutResult r;
      r.broker = OutResult::Broker::kFailed;
      r.error = std::string("cannot make a Kafka producer: ") + err;
      return Fail(std::move(done), std::move(r));
    }
    Producer* raw = p.get();
    p->poller = StartNamedThread("kafka-poll", [raw] {
      while (!raw->stopping) rd_kafka_poll(raw->rk, 100);
    });
    slot = std::move(p);
  }
  Producer& p = *slot;
  p.used_us = now_us;

  rd_kafka_headers_t* headers = rd_kafka_headers_new(req.headers.size());
  for (const std::string& h : req.headers) {
    if (auto nv = delivery::SplitHeaderLine(h)) {
      rd_kafka_header_add(headers, nv->first.data(), static_cast<ssize_t>(nv->first.size()),
                          nv->second.data(), static_cast<ssize_t>(nv->second.size()));
    }
  }
  const std::string record_key = req.job.key.empty() ? std::to_string(req.job.id) : req.job.key;
  auto rec = std::make_unique<Record>();
  rec->done = std::move(done);
  rec->producer = key;
  rec->started_us = now_us;
  const rd_kafka_resp_err_t e = rd_kafka_producev(
      p.rk, RD_KAFKA_V_TOPIC(url->topic.c_str()),
      RD_KAFKA_V_KEY(record_key.data(), record_key.size()),
      RD_KAFKA_V_VALUE(req.body.data(), req.body.size()), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
      RD_KAFKA_V_HEADERS(headers), RD_KAFKA_V_OPAQUE(rec.get()), RD_KAFKA_V_END);
  if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
    rd_kafka_headers_destroy(headers);  // still ours when producev fails
    OutResult r;
    r.broker = Rejected(e) ? OutResult::Broker::kRejected : OutResult::Broker::kFailed;
    r.error = ErrorText(e);
    return Fail(std::move(rec->done), std::move(r));
  }
  rec.release();  // librdkafka's until its delivery report
  ++p.in_flight;
}

void KafkaSender::FailProducersForTest() {
  for (auto& [key, p] : producers_) {
    rd_kafka_test_fatal_error(p->rk, RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER,
                              "injected by a test");
  }
}

void KafkaSender::Fail(Callback done, OutResult r) {
  executor_([this, done = std::move(done), r = std::move(r)]() mutable {
    if (!stopped_) done(std::move(r));
  });
}

void KafkaSender::SetProperties(const KafkaPropertySets& sets) {
  std::map<std::string, Properties> next;
  for (const auto& [name, settings] : sets) {
    auto old = properties_.find(name);
    const bool same = old != properties_.end() && old->second.settings == settings;
    next.emplace(name, Properties{settings, same ? old->second.generation : ++generations_});
  }
  properties_ = std::move(next);
  swept_us_ = 0;  // retire the producers made with earlier settings at the next send
}

bool KafkaSender::Current(const Producer& p) const {
  if (p.properties.empty()) return true;
  auto it = properties_.find(p.properties);
  return it != properties_.end() && it->second.generation == p.generation;
}

void KafkaSender::DropIdle(int64_t now_us) {
  if (now_us - swept_us_ < kSweepUs) return;
  swept_us_ = now_us;
  for (auto it = producers_.begin(); it != producers_.end();) {
    Producer& p = *it->second;
    if (p.in_flight == 0 && (now_us - p.used_us > kIdleUs || !Current(p))) {
      p.Close();
      it = producers_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace delayd::brokers
