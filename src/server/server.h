// Server: wires the store, the engine and the protocol listeners onto one
// event loop, and runs it until SIGTERM or SIGINT.
//
// Threads: the engine, the listeners, the dispatcher, the timer service and
// in cluster mode the claimer and the shard clock all run on the event
// loop's one thread (Run's caller), and every callback into them is posted
// there. Beside it run the store's own threads (its writer, syncer and read
// lanes: store/postgres/pg_store.h, store/sqlite/sqlite_store.h), the HTTP
// client's transfer thread, and in cluster mode the member's lease thread;
// each hands its results back through the event loop.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <memory>
#include <set>

#include "brokers/amqp_sender.h"
#include "brokers/kafka_sender.h"
#include "cluster/claimer.h"
#include "cluster/id_blocks.h"
#include "cluster/member.h"
#include "cluster/shard_clock.h"
#include "common/clock.h"
#include "delivery/dispatcher.h"
#include "delivery/http_client.h"
#include "delivery/target_router.h"
#include "engine/engine.h"
#include "http/api.h"
#include "http/server.h"
#include "protocol/beanstalk/listener.h"
#include "rpc/grpc_sender.h"
#include "rpc/listener.h"
#include "server/config.h"
#include "server/service_notifier.h"
#include "store/store.h"
#include "timer/timer_service.h"

namespace delayd::server {

class Server {
 public:
  explicit Server(Config config);
  ~Server();

  // Opens the store, recovers, and starts listening. Logs one line naming
  // every address it listens on.
  Status Start();
  // Serves until a stop signal, then shuts down gracefully: stops accepting,
  // answers what is in flight, flushes the store. Returns the exit code.
  int Run();

 private:
  // SQLite in the data dir, or PostgreSQL when --store names one.
  Status OpenStore();
  Status LockDataDir();
  // Arms `timer` for `steady_us` unless it is armed earlier (`armed_us`,
  // -1: not armed); `run` runs when it goes off.
  void ArmAt(boost::asio::steady_timer& timer, int64_t& armed_us, int64_t steady_us,
             void (Server::*run)());
  void ArmTimer(int64_t steady_us);
  void ArmTimers(int64_t wall_ms);
  // Makes due jobs ready and hands due push jobs to the HTTP client at once.
  void RunEngine();
  void OnSignal(int signo);
  // SIGHUP: the Kafka properties and token files read again. A token file
  // never reads as no token (LoadTokens refuses that), so a reload cannot
  // open an API that needed tokens.
  void Reload();
  void ReadFilesAgain();  // Reload's work
  http::TlsFiles tls_files() const {
    return {config_.tls_cert, config_.tls_key, config_.tls_client_ca};
  }
  void Shutdown();
  void WaitForQuiet(int attempts_left);
  void SchedulePurge();
  // Cluster mode: the parts beside the engine, started once the listeners'
  // addresses are known.
  Status StartCluster(const std::string& beanstalk, const std::string& http);
  void ArmCluster(int64_t steady_us);
  // The claimer's and the shard clock's due work.
  void RunCluster();
  void ScheduleFigures();
  // Why this node should take no traffic now (GET /readyz); "" when it should.
  // /readyz: why not ready ("" when ready), after a probe of the store that
  // is shared by the requests of one second.
  void NotReady(std::function<void(std::string)> done);
  struct StoreProbe {
    int64_t at_us = -1;  // steady time of the last result
    Status result;
    std::string why;  // what /readyz says of a failed result
    bool running = false;
    std::vector<std::function<void(std::string)>> waiting;
  } probe_;
  void ClusterView(std::function<void(Result<nlohmann::json>)> done);

  Config config_;
  SystemClock clock_;
  Metrics metrics_;  // recorded by the engine, dispatcher, shard clock and API
  boost::asio::io_context io_;
  boost::asio::signal_set signals_;
  boost::asio::steady_timer engine_timer_;
  boost::asio::steady_timer timers_timer_;
  boost::asio::steady_timer shutdown_timer_;
  int64_t armed_us_ = -1;
  // The data directory's lock (flock on <data-dir>/delayd.lock), held while
  // the process runs so that a second delayd refuses the directory; -1 on
  // PostgreSQL, whose database is held by the store (pg_owner.h).
  int data_lock_fd_ = -1;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<engine::Engine> engine_;
  beanstalk::ServerCounters counters_;
  beanstalk::ProcessInfo process_;
  std::unique_ptr<beanstalk::Listener> listener_;
  std::unique_ptr<delivery::TargetPolicy> target_policy_;  // read by http_client_ and api_
  std::unique_ptr<delivery::HttpClient> http_client_;
  std::unique_ptr<rpc::GrpcSender> grpc_sender_;        // gRPC targets' deliveries
  std::unique_ptr<brokers::KafkaSender> kafka_sender_;  // Kafka targets' deliveries
  std::set<std::string> kafka_properties_;              // the NAMEs (read by api_)
  std::unique_ptr<brokers::AmqpSender> amqp_sender_;    // RabbitMQ targets' deliveries
  std::unique_ptr<delivery::TargetRouter> sender_;      // the dispatcher's: by the URL's kind
  std::unique_ptr<delivery::Dispatcher> dispatcher_;
  std::unique_ptr<timer::TimerService> timers_;
  std::unique_ptr<http::Api> api_;
  std::unique_ptr<http::Server> http_server_;
  std::unique_ptr<rpc::Listener> grpc_listener_;  // --grpc; calls go to api_
  boost::asio::steady_timer purge_timer_;
  // Cluster mode (--cluster) only.
  std::string node_id_;
  std::unique_ptr<cluster::IdBlocks> ids_;
  std::unique_ptr<cluster::Claimer> claimer_;
  std::unique_ptr<cluster::ShardClock> shard_clock_;
  std::unique_ptr<cluster::Member> member_;
  boost::asio::steady_timer cluster_timer_;
  int64_t cluster_armed_us_ = -1;
  boost::asio::steady_timer figures_timer_;
  ServiceNotifier notifier_;  // systemd: ready, reloading, stopping, watchdog
  bool stopping_ = false;
};

}  // namespace delayd::server
