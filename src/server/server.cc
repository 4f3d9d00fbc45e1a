#include "server/server.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <utility>

#include "common/allocator.h"
#include "common/problem.h"
#include "common/time_format.h"
#include "store/postgres/pg_leases.h"
#include "store/postgres/pg_store.h"
#include "store/sqlite/sqlite_store.h"

namespace delayd::server {

// At shutdown, replies owed to clients may take this long to go out, checked
// every kDrainPollMs.
constexpr int kDrainMs = 5000;
constexpr int kDrainPollMs = 10;
// Cluster mode: how long a node's writer waits for company for changes it
// answered before their commit (a worker's delete, release, bury, touch:
// SharedHome::WriteHeld), so that a serial consumer's deletes share
// transactions. What a kill -9 can bring back grows by as much (README).
constexpr int64_t kHeldLingerUs = 2000;

namespace asio = boost::asio;

namespace {
std::string RandomHex16() {
  std::random_device rd;
  uint64_t v = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return fmt::format("{:016x}", v);
}

std::string HostName() {
  struct utsname un {};
  uname(&un);
  return un.nodename;
}

// HOSTNAME:PORT of the first beanstalk address; with no fixed port (0, or
// a Unix socket), HOSTNAME:pid<PID>.
std::string DefaultNodeId(const std::vector<std::string>& beanstalk) {
  const std::string first = beanstalk.empty() ? "" : beanstalk.front();
  const size_t colon = first.rfind(':');
  if (first.rfind("unix:", 0) == 0 || colon == std::string::npos ||
      first.substr(colon + 1) == "0") {
    return fmt::format("{}:pid{}", HostName(), getpid());
  }
  return HostName() + first.substr(colon);
}
}  // namespace

Server::Server(Config config)
    : config_(std::move(config)),
      signals_(io_, SIGINT, SIGTERM, SIGUSR1),
      engine_timer_(io_),
      timers_timer_(io_),
      shutdown_timer_(io_),
      purge_timer_(io_),
      cluster_timer_(io_),
      figures_timer_(io_),
      notifier_(io_) {
  signals_.add(SIGHUP);  // settings files read again (Reload)
}

Server::~Server() {
  // Everything is flushed by now; a second stop signal (an impatient
  // operator, or a supervisor repeating SIGTERM) must not turn a clean exit
  // into death by signal once the signal set below is gone.
  signals_.clear();
  std::signal(SIGTERM, SIG_IGN);
  std::signal(SIGINT, SIG_IGN);
  std::signal(SIGHUP, SIG_IGN);
  // Completions still queued on the loop (a delivery's result, a store
  // answer, an HTTP session ending on its closed socket) refer to the
  // dispatcher, the API and the HTTP server: they run first, while all of
  // them are alive. The HTTP, gRPC, Kafka and RabbitMQ senders and the store post nothing more once
  // stopped (the store answers whatever was queued, refusing the rest), and
  // what the completions start ends at once or is never run.
  if (http_client_) http_client_->Stop();
  if (grpc_sender_) grpc_sender_->Stop();
  if (kafka_sender_) kafka_sender_->Stop();
  if (amqp_sender_) amqp_sender_->Stop();
  if (store_) store_->Close();
  io_.restart();
  for (int round = 0; round < 1000 && io_.poll() > 0; ++round) {
  }
  if (grpc_listener_) grpc_listener_->Stop();
  grpc_listener_.reset();
  http_server_.reset();
  api_.reset();
  dispatcher_.reset();
  sender_.reset();
  grpc_sender_.reset();
  kafka_sender_.reset();
  amqp_sender_.reset();
  http_client_.reset();
  listener_.reset();
  timers_.reset();  // unsubscribes from the engine, so before it
  engine_.reset();
  member_.reset();  // without Leave (a failed start): the others see a crash
  shard_clock_.reset();
  claimer_.reset();
  ids_.reset();
  store_.reset();
  if (data_lock_fd_ >= 0) ::close(data_lock_fd_);  // the lock goes with it
}

namespace {
// Each connection takes a descriptor; ask for as many as the hard limit allows.
void RaiseFileLimit(uint64_t max_connections) {
  struct rlimit rl {};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
  if (rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < max_connections + 64) {
    spdlog::warn("open file limit {} is below --max-connections {}; connections past it wait",
                 rl.rlim_cur, max_connections);
  }
}
}  // namespace

// One owner per data directory, as per PostgreSQL database: two processes
// over one SQLite file would each keep their own idea of its jobs and hand
// out the same ids. The kernel drops the lock when the holder dies, so a
// restart after kill -9 finds it free. The file says who holds it.
Status Server::LockDataDir() {
  const std::string path = (std::filesystem::path(config_.data_dir) / "delayd.lock").string();
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Status::IoError(fmt::format("open {}: {}", path, std::strerror(errno)));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char buf[512];
    ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
    ::close(fd);
    if (err != EWOULDBLOCK) {
      return Status::IoError(fmt::format("lock {}: {}", path, std::strerror(err)));
    }
    std::string holder(buf, n > 0 ? static_cast<size_t>(n) : 0);
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == '\0')) holder.pop_back();
    return Status::Conflict(fmt::format(
        "data directory {} is held by another delayd ({}): stop it first, or give this one "
        "a --data-dir of its own (several nodes share jobs only on PostgreSQL, with --cluster); "
        "this process wrote nothing to it",
        config_.data_dir, holder.empty() ? "which did not say who" : holder));
  }
  const std::string who =
      fmt::format("pid {}, node {}, since {}\n", getpid(), DefaultNodeId(config_.beanstalk),
                  FormatRfc3339Ms(clock_.WallMillis()));
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, who.data(), who.size(), 0) < 0) {
    spdlog::warn("{}: cannot write who holds it: {}", path, std::strerror(errno));
  }
  data_lock_fd_ = fd;
  return Status::Ok();
}

Status Server::OpenStore() {
  Executor post = [this](std::function<void()> f) { asio::post(io_, std::move(f)); };
  if (!config_.store.empty()) {
    auto store = store::PgStore::Open(
        {.conninfo = config_.store,
         .sync_delay_ms = config_.sync_delay_ms,
         .node_id = node_id_,
         .owner_name = fmt::format(
             "{} pid {}", node_id_.empty() ? DefaultNodeId(config_.beanstalk) : node_id_, getpid()),
         .linger_us = node_id_.empty() ? 0 : kHeldLingerUs,
         .clock = &clock_},
        std::move(post));
    if (!store.ok()) return store.status();
    store_ = std::move(store).value();
    return Status::Ok();
  }
  std::error_code fs_ec;
  std::filesystem::create_directories(config_.data_dir, fs_ec);
  if (fs_ec) return Status::IoError("create " + config_.data_dir + ": " + fs_ec.message());
  if (Status s = LockDataDir(); !s.ok()) return s;
  auto store = store::SqliteStore::Open(
      {.path = (std::filesystem::path(config_.data_dir) / "delayd.db").string(),
       .sync_delay_ms = config_.sync_delay_ms},
      std::move(post));
  if (!store.ok()) return store.status();
  store_ = std::move(store).value();
  return Status::Ok();
}

Status Server::Start() {
  RaiseFileLimit(config_.max_connections);
  if (config_.cluster) {
    node_id_ = config_.node_id.empty() ? DefaultNodeId(config_.beanstalk) : config_.node_id;
  }
  if (Status s = OpenStore(); !s.ok()) return s;

  engine::EngineOptions eo;
  eo.horizon_ms = config_.horizon_ms;
  eo.ready_window = config_.ready_window;
  eo.done_retention_ms = config_.done_retention_ms;
  engine_ =
      std::make_unique<engine::Engine>(*store_, clock_, eo, [this](int64_t at) { ArmTimer(at); });
  engine_->SetMetrics(&metrics_);
  if (store::SharedQueue* q = store_->shared()) {
    auto wake = [this](int64_t at) { ArmCluster(at); };
    ids_ = std::make_unique<cluster::IdBlocks>(*q);
    claimer_ =
        std::make_unique<cluster::Claimer>(*store_, *q, clock_, cluster::ClaimerOptions{}, wake);
    shard_clock_ = std::make_unique<cluster::ShardClock>(*store_, *q, clock_,
                                                         cluster::ShardClockOptions{}, wake);
    shard_clock_->SetMetrics(&metrics_);
    shard_clock_->ServeWaiters(claimer_.get());
    engine_->JoinCluster(*q, *claimer_, *ids_);
  }
  if (Status s = engine_->Recover(); !s.ok()) return s;

  struct utsname un {};
  uname(&un);
  process_.version = kBeanstalkStatsVersion;
  process_.instance_id = RandomHex16();
  process_.hostname = un.nodename;
  process_.os = un.version;
  process_.platform = un.machine;
  process_.started_us = clock_.SteadyMicros();
  process_.max_job_size = config_.max_job_size;

  beanstalk::SessionContext ctx{*engine_,
                                clock_,
                                counters_,
                                process_,
                                config_.max_job_size,
                                [this] { return store_->stats().mutations; },
                                nullptr};
  listener_ = std::make_unique<beanstalk::Listener>(io_, std::move(ctx), config_.max_connections);
  std::string addresses;
  std::string first_beanstalk;
  std::string http_address;
  for (const std::string& spec : config_.beanstalk) {
    auto ep = beanstalk::ParseEndpoint(spec);
    if (!ep.ok()) return ep.status();
    auto bound = listener_->Listen(ep.value());
    if (!bound.ok()) return bound.status();
    addresses += " beanstalk=" + bound.value();
    if (first_beanstalk.empty()) first_beanstalk = bound.value();
  }
  auto policy = delivery::TargetPolicy::Make(config_.target_allow, config_.target_deny);
  if (!policy.ok()) return policy.status();
  target_policy_ = std::make_unique<delivery::TargetPolicy>(std::move(*policy));
  http_client_ = std::make_unique<delivery::HttpClient>(
      [this](std::function<void()> f) { asio::post(io_, std::move(f)); }, 1024, *target_policy_);
  grpc_sender_ = std::make_unique<rpc::GrpcSender>(
      [this](std::function<void()> f) { asio::post(io_, std::move(f)); }, *target_policy_, clock_);
  auto kafka_properties = brokers::LoadKafkaProperties(config_.kafka_properties, &std::getenv);
  if (!kafka_properties.ok()) return kafka_properties.status();
  for (const auto& [name, file] : config_.kafka_properties) kafka_properties_.insert(name);
  kafka_sender_ = std::make_unique<brokers::KafkaSender>(
      [this](std::function<void()> f) { asio::post(io_, std::move(f)); }, *target_policy_, clock_);
  kafka_sender_->SetProperties(*kafka_properties);
  amqp_sender_ = std::make_unique<brokers::AmqpSender>(
      [this](std::function<void()> f) { asio::post(io_, std::move(f)); }, *target_policy_, clock_);
  sender_ = std::make_unique<delivery::TargetRouter>(*http_client_, *grpc_sender_, *kafka_sender_,
                                                     *amqp_sender_);
  // In cluster mode both work on the owned shards' jobs and timers only,
  // which the engine and the timer service learn with each lease round.
  dispatcher_ = std::make_unique<delivery::Dispatcher>(
      io_, *engine_, *sender_, clock_,
      delivery::DispatcherOptions{.max_in_flight = config_.max_deliveries,
                                  .topic_concurrency = config_.topic_concurrency});
  dispatcher_->SetMetrics(&metrics_);
  dispatcher_->Start();
  timers_ = std::make_unique<timer::TimerService>(
      *store_, *engine_, clock_,
      timer::TimerOptions{.misfire_grace_ms = config_.timer_misfire_grace_ms},
      [this](int64_t wall_ms) { ArmTimers(wall_ms); });
  if (store::SharedQueue* q = store_->shared()) timers_->JoinCluster(*q);
  if (Status s = timers_->Start(); !s.ok()) return s;
  // The API serves the HTTP port and the gRPC port alike (rpc/listener.h).
  if (config_.http != "off" || config_.grpc != "off") {
    auto tokens = LoadTokens(config_, &std::getenv);
    if (!tokens.ok()) return tokens.status();
    http::ApiOptions ao;
    ao.access = {.tokens = std::move(*tokens),
                 .allowed_origins = config_.http_allow_origin,
                 .allowed_hosts = config_.http_allowed_hosts};
    ao.metrics_topics = config_.metrics_topics;
    ao.max_batch = config_.max_batch;
    ao.limits.max_body_bytes = config_.max_job_size;
    ao.limits.targets = target_policy_.get();
    ao.limits.kafka_properties = &kafka_properties_;
    ao.version = kVersion;
    ao.metrics = &metrics_;
    ao.metrics_need_token = config_.metrics_auth;
    ao.console = config_.console == "off"         ? http::ConsoleMode::kOff
                 : config_.console == "read-only" ? http::ConsoleMode::kReadOnly
                                                  : http::ConsoleMode::kOn;
    ao.store_stats = [this] { return store_->stats(); };
    ao.beanstalk_connections = [this] { return uint64_t{listener_->sessions()}; };
    ao.http_connections = [this] {
      return uint64_t{http_server_ ? http_server_->connections() : 0};
    };
    ao.not_ready = [this](std::function<void(std::string)> done) { NotReady(std::move(done)); };
    if (engine_->clustered()) {
      ao.cluster_view = [this](std::function<void(Result<nlohmann::json>)> done) {
        ClusterView(std::move(done));
      };
    }
    api_ = std::make_unique<http::Api>(io_, *engine_, clock_, dispatcher_.get(), nullptr,
                                       std::move(ao), timers_.get());
  }
  if (config_.http != "off") {
    http::ServerOptions so;
    so.max_body_bytes = config_.max_request_bytes;
    so.max_connections = config_.max_connections;
    http_server_ = std::make_unique<http::Server>(io_, *api_, so);
    if (!config_.tls_cert.empty()) {
      auto tls = http::MakeTlsContext(tls_files());
      if (!tls.ok()) return tls.status();
      http_server_->SetTls(std::move(*tls));
    }
    auto bound = http_server_->Listen(config_.http);
    if (!bound.ok()) return bound.status();
    addresses += " http=" + bound.value() + (config_.tls_cert.empty() ? "" : " (TLS)");
    http_address = bound.value();
  }
  if (config_.grpc != "off") {
    grpc_listener_ = std::make_unique<rpc::Listener>(
        io_, *api_,
        rpc::ListenerOptions{.max_message_bytes = config_.max_request_bytes,
                             .max_reserve_wait_ms = http::ApiOptions{}.max_reserve_wait_ms,
                             .tls = tls_files()});
    auto bound = grpc_listener_->Listen(config_.grpc);
    if (!bound.ok()) return bound.status();
    addresses += " grpc=" + bound.value();
  }
  if (engine_->clustered()) {
    if (Status s = StartCluster(first_beanstalk, http_address); !s.ok()) return s;
    addresses += " node=" + node_id_;
  }
  SchedulePurge();
  spdlog::info("memory allocator: {}", MemoryAllocator());
  spdlog::info("delayd {} listening{} {}", kVersion, addresses,
               config_.store.empty() ? "data-dir=" + config_.data_dir : "store=postgres");
  // Recovered and listening: a Type=notify unit's start is over.
  notifier_.Ready("listening" + addresses);
  signals_.async_wait([this](boost::system::error_code ec, int signo) {
    if (!ec) OnSignal(signo);
  });
  return Status::Ok();
}

void Server::ArmAt(asio::steady_timer& timer, int64_t& armed_us, int64_t steady_us,
                   void (Server::*run)()) {
  if (armed_us >= 0 && steady_us >= armed_us) return;
  armed_us = steady_us;
  timer.expires_at(asio::steady_timer::time_point(std::chrono::microseconds(steady_us)));
  timer.async_wait([this, &armed_us, run](boost::system::error_code ec) {
    if (ec) return;  // re-armed earlier, or stopping
    armed_us = -1;
    (this->*run)();
  });
}

void Server::ArmTimer(int64_t steady_us) {
  ArmAt(engine_timer_, armed_us_, steady_us, &Server::RunEngine);
}

void Server::RunEngine() {
  engine_->Tick();
  if (dispatcher_) dispatcher_->PumpPending();
}

void Server::ArmTimers(int64_t wall_ms) {
  timers_timer_.expires_after(
      std::chrono::milliseconds(std::max<int64_t>(0, wall_ms - clock_.WallMillis())));
  timers_timer_.async_wait([this](boost::system::error_code ec) {
    if (ec || stopping_) return;
    // Cron fires fall on whole seconds, where due jobs gather too: jobs due
    // now go out before the timer service's work (store reads, new jobs).
    RunEngine();
    timers_->Tick();
  });
}

void Server::SchedulePurge() {
  // Done jobs past their retention leave the store in the background.
  purge_timer_.expires_after(std::chrono::seconds(10));
  purge_timer_.async_wait([this](boost::system::error_code ec) {
    if (ec || stopping_) return;
    engine_->PurgeDone();
    SchedulePurge();
  });
}

void Server::OnSignal(int signo) {
  if (signo == SIGINT || signo == SIGTERM) {
    spdlog::info("signal {}: shutting down", signo);
    notifier_.Stopping();
    return Shutdown();
  }
  if (signo == SIGUSR1) {
    // beanstalkd's drain mode: refuse new jobs, serve the rest.
    spdlog::info("SIGUSR1: draining, new puts are refused");
    engine_->SetDraining(true);
  } else {
    Reload();  // SIGHUP
  }
  signals_.async_wait([this](boost::system::error_code ec, int s) {
    if (!ec) OnSignal(s);
  });
}

void Server::Reload() {
  notifier_.Reloading();
  ReadFilesAgain();
  notifier_.Reloaded();
}

void Server::ReadFilesAgain() {
  // The files named at start, read again; a file that cannot be read keeps
  // what it gave as it was, and the others are still read.
  auto kafka = brokers::LoadKafkaProperties(config_.kafka_properties, &std::getenv);
  if (!kafka.ok()) {
    spdlog::error("SIGHUP: kept the Kafka properties in use: {}", kafka.status().message());
  } else {
    kafka_sender_->SetProperties(*kafka);
    spdlog::info("SIGHUP: re-read {} Kafka properties file(s)", kafka->size());
  }
  if (http_server_ && !config_.tls_cert.empty()) {
    // Connections open now (a long poll among them) keep the certificate
    // they began with; new ones get the new one.
    auto tls = http::MakeTlsContext(tls_files());
    if (!tls.ok()) {
      spdlog::error("SIGHUP: kept the TLS certificate in use: {}", tls.status().message());
    } else {
      http_server_->SetTls(std::move(*tls));
      spdlog::info("SIGHUP: re-read the TLS certificate {}", config_.tls_cert);
    }
  }
  if (api_ == nullptr) return;
  auto tokens = LoadTokens(config_, &std::getenv);
  if (!tokens.ok()) {
    spdlog::error("SIGHUP: kept the API tokens in use: {}", tokens.status().message());
    return;
  }
  const size_t n = tokens->size();
  api_->SetTokens(std::move(*tokens));
  spdlog::info("SIGHUP: {} API token(s) in use", n);
}

void Server::Shutdown() {
  if (stopping_) return;
  stopping_ = true;
  listener_->StopAccepting();
  if (http_server_) http_server_->StopAccepting();
  if (grpc_listener_) grpc_listener_->BeginShutdown();
  if (dispatcher_) dispatcher_->Stop();
  figures_timer_.cancel();
  purge_timer_.cancel();
  // New puts on open connections now get DRAINING (HTTP: 503); let replies
  // already owed (waiting for the store) go out, for up to 5 seconds. HTTP
  // long polls would wait their full timeout: they end now.
  engine_->SetDraining(true);
  if (api_) api_->EndLongPolls();
  WaitForQuiet(kDrainMs / kDrainPollMs);
}

void Server::WaitForQuiet(int attempts_left) {
  // Deliveries in flight record their outcomes before the store closes; push
  // claims in flight are answered, so that ReturnClaimed sees their jobs
  // (else they stay claimed by this node until their ttr runs out).
  const size_t busy = listener_->BusySessions() +
                      (http_server_ ? http_server_->busy_connections() : 0) +
                      (grpc_listener_ ? grpc_listener_->busy() : 0) +
                      (dispatcher_ ? dispatcher_->stats().in_flight : 0) +
                      (engine_->clustered() ? engine_->PushClaimsInFlight() : 0);
  if (busy > 0 && attempts_left > 0) {
    shutdown_timer_.expires_after(std::chrono::milliseconds(kDrainPollMs));
    shutdown_timer_.async_wait(
        [this, attempts_left](boost::system::error_code) { WaitForQuiet(attempts_left - 1); });
    return;
  }
  listener_->CloseAll();
  if (http_server_) http_server_->CloseAll();
  // Push jobs claimed for the dispatcher and never taken go to the shards'
  // next owners now, not after their ttr.
  if (engine_->clustered()) engine_->ReturnClaimed();
  store_->Close();
  // The last writes as an owner are answered: the shards go to the other
  // nodes at their next round, not after the lease runs out.
  if (member_) {
    if (Status s = member_->Leave(); !s.ok()) {
      spdlog::warn("cluster: leaving: {}; the shards move once the lease runs out", s.ToString());
    }
  }
  engine_timer_.cancel();
  timers_timer_.cancel();
  cluster_timer_.cancel();
  signals_.cancel();
  io_.stop();
}

Status Server::StartCluster(const std::string& beanstalk, const std::string& http) {
  store::SharedQueue* q = store_->shared();
  Status s = q->Listen([this](std::vector<store::Notice> notices) {
    shard_clock_->Hear(notices);
    claimer_->Hear(notices);
    engine_->Hear(notices);
    timers_->Hear(notices);
  });
  if (!s.ok()) return s;
  auto table = store::pg::PgLeaseTable::Open(config_.store,
                                             {.node_id = node_id_, .lease_ms = config_.lease_ms});
  if (!table.ok()) return table.status();
  auto member = cluster::Member::Start(
      std::move(table).value(), {.beanstalk = beanstalk, .http = http, .clock = &clock_},
      [this](std::function<void()> f) { asio::post(io_, std::move(f)); },
      [this](std::vector<store::Lease> held) {
        // One value for every part that acts as an owner.
        const store::Ownership owned(held);
        shard_clock_->SetOwnership(owned);
        engine_->SetOwnership(owned);
        timers_->SetOwnership(owned);
      });
  if (!member.ok()) return member.status();
  member_ = std::move(member).value();
  ScheduleFigures();
  return Status::Ok();
}

void Server::ArmCluster(int64_t steady_us) {
  ArmAt(cluster_timer_, cluster_armed_us_, steady_us, &Server::RunCluster);
}

void Server::NotReady(std::function<void(std::string)> done) {
  if (stopping_) return done("shutting down");
  if (store_->stats().failing) return done("the store's last write failed; it takes no writes now");
  if (engine_->clustered() && member_ == nullptr) return done("joining the cluster");
  constexpr int64_t kProbeFreshUs = 1'000'000;
  auto why = [this] { return probe_.result.ok() ? std::string() : probe_.why; };
  if (probe_.at_us >= 0 && clock_.SteadyMicros() - probe_.at_us < kProbeFreshUs) return done(why());
  probe_.waiting.push_back(std::move(done));
  if (probe_.running) return;
  probe_.running = true;
  auto result = std::make_shared<Status>();
  store_->ReadAside(
      [this, result] { *result = store_->Probe(); },
      [this, result, why] {
        probe_.running = false;
        probe_.result = *result;
        if (!result->ok()) {
          const std::string id = NewRequestId();
          spdlog::warn("readyz {}: the store cannot be used: {}", id, result->message());
          probe_.why = "the store cannot be used (readyz " + id + " in the server's log)";
        }
        probe_.at_us = clock_.SteadyMicros();
        for (auto& f : std::exchange(probe_.waiting, {})) f(why());
      });
}

void Server::RunCluster() {
  claimer_->Tick();
  shard_clock_->Tick();
}

// What each node records with its lease rounds, for the cluster view.
void Server::ScheduleFigures() {
  const cluster::ClaimerStats c = claimer_->stats();
  const cluster::ShardClockStats k = shard_clock_->stats();
  const engine::EngineStats e = engine_->Stats();
  const delivery::DispatcherStats d = dispatcher_->stats();
  nlohmann::json figures = {
      {"connections", listener_->sessions()},
      {"waiting", e.waiting},
      {"held", e.reserved},
      {"puts", e.total_jobs},
      {"claims", c.claims},
      {"granted", c.granted},
      {"returned", c.returned},
      {"claim_failures", c.failures},
      {"shards", k.shards},
      {"due_held", k.held},
      {"promoted", k.promoted},
      {"promoted_reserved", k.reserved},
      {"fencing_refusals", k.fencing_refusals},
      {"owner_write_errors", k.write_errors},
      {"deliveries_in_flight", d.in_flight},
      {"delivered", d.delivered},
      {"delivery_failures", d.failed},
      {"timers_held", timers_->loaded()},
  };
  member_->SetFigures(figures.dump());
  figures_timer_.expires_after(std::chrono::seconds(1));
  figures_timer_.async_wait([this](boost::system::error_code ec) {
    if (ec || stopping_) return;
    ScheduleFigures();
  });
}

void Server::ClusterView(std::function<void(Result<nlohmann::json>)> done) {
  member_->View([this, done = std::move(done)](Result<store::ClusterView> view) {
    if (!view.ok()) return done(view.status());
    nlohmann::json nodes = nlohmann::json::array();
    for (const store::NodeView& n : view->nodes) {
      nlohmann::json figures =
          nlohmann::json::parse(n.figures, nullptr, /*allow_exceptions=*/false);
      nodes.push_back({{"id", n.id},
                       {"beanstalk", n.beanstalk},
                       {"http", n.http},
                       {"started_ms", n.started_ms},
                       {"last_seen_ms", n.seen_ms},
                       {"live", n.live},
                       {"shards_owned", n.shards},
                       {"figures", figures.is_discarded() ? nlohmann::json(nullptr) : figures}});
    }
    nlohmann::json shards = nlohmann::json::array();
    for (const store::ShardView& s : view->shards) {
      shards.push_back(
          {{"shard", s.shard},
           {"owner", s.owner.empty() ? nlohmann::json(nullptr) : nlohmann::json(s.owner)},
           {"epoch", s.epoch},
           {"lease_expires_ms", s.expires_ms},
           {"live", s.live}});
    }
    done(nlohmann::json{{"node", node_id_},
                        {"lease_ms", config_.lease_ms},
                        {"now_ms", view->now_ms},
                        {"nodes", std::move(nodes)},
                        {"shards", std::move(shards)}});
  });
}

int Server::Run() {
  io_.run();
  spdlog::info("stopped");
  return 0;
}

}  // namespace delayd::server
