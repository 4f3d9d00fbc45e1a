// gRPC benchmarks of delayd (its --grpc listener and grpc:// push targets),
// loopback only, each stopping by itself; bench/grpc runs them beside
// http_load's in one run.
//
//   grpc_load submit  --addr HOST:PORT [--conns 4] [--batch 1000] [--jobs 200000]
//       submits jobs (delays spread over an hour, a JSON body) with Submit
//       (--batch 1) or SubmitBatch, one call in flight per connection;
//       prints jobs/s and the calls' latency p50/p99.
//   grpc_load deliver --addr HOST:PORT [--jobs 100000] [--lead-ms 3000]
//       runs a JobReceiver on 127.0.0.1 answering OK at once, submits push
//       jobs to it due over one second `lead-ms` from now, and prints
//       delivery throughput and lateness (receipt time minus due_at)
//       p50/p99/max.
//   grpc_load floor
//       serves delayd.v1.Jobs on 127.0.0.1 (printing "port N") with a Submit
//       that does nothing but what delayd's listener does around each call:
//       hands it to another thread and finishes it from there. What gRPC
//       itself costs on this machine, to read `submit` against; runs until
//       killed.
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "delayd/v1/jobs.grpc.pb.h"
#include "delayd/v1/receiver.grpc.pb.h"
#include "delayd/v1/topics.grpc.pb.h"
#include "load_util.h"

using namespace std::chrono;
using namespace delayd::bench;
namespace v1 = delayd::v1;

namespace {

int64_t NowMs() {
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

// A channel of its own (gRPC would share one connection between channels
// of equal arguments).
std::shared_ptr<grpc::Channel> Channel(const std::string& addr, int n) {
  grpc::ChannelArguments args;
  args.SetInt("delayd.bench.channel", n);
  return grpc::CreateCustomChannel(addr, grpc::InsecureChannelCredentials(), args);
}

v1::SubmitRequest Job(const std::string& topic, long i, std::optional<int64_t> run_at_ms) {
  v1::SubmitRequest r;
  r.set_topic(topic);
  if (run_at_ms) {
    r.mutable_run_at()->set_seconds(*run_at_ms / 1000);
    r.mutable_run_at()->set_nanos(static_cast<int32_t>(*run_at_ms % 1000) * 1'000'000);
  } else {
    // Delays spread over an hour, as http_load's.
    const long ms = 1000 + (i * 7919) % 3'600'000;
    r.mutable_delay()->set_seconds(ms / 1000);
    r.mutable_delay()->set_nanos(static_cast<int32_t>(ms % 1000) * 1'000'000);
  }
  r.set_body("{\"order\":" + std::to_string(i) + "}");
  r.set_body_is_json(true);
  return r;
}

struct SubmitResult {
  double jobs_per_s = 0;
  double p50_ms = 0, p99_ms = 0;  // per call
};

// Submits `jobs` over `conns` connections, `batch` a call; `run_at(i)` the
// due time of job i (none: a delay).
template <class RunAt>
SubmitResult Submit(const std::string& addr, const std::string& topic, long jobs, long batch,
                    long conns, RunAt run_at) {
  std::atomic<long> next{0};
  std::atomic<bool> failed{false};
  std::mutex mu;
  std::vector<int64_t> latencies_us;
  const auto start = steady_clock::now();
  std::vector<std::thread> threads;
  for (long c = 0; c < conns; ++c) {
    threads.emplace_back([&, c] {
      auto stub = v1::Jobs::NewStub(Channel(addr, static_cast<int>(c)));
      std::vector<int64_t> mine;
      for (;;) {
        const long first = next.fetch_add(batch);
        if (first >= jobs || failed) break;
        const long n = std::min(batch, jobs - first);
        grpc::ClientContext ctx;
        ctx.set_deadline(system_clock::now() + seconds(60));
        const auto t0 = steady_clock::now();
        grpc::Status s;
        if (batch == 1) {
          v1::SubmitResponse res;
          s = stub->Submit(&ctx, Job(topic, first, run_at(first)), &res);
        } else {
          v1::SubmitBatchRequest req;
          req.set_topic(topic);
          for (long i = first; i < first + n; ++i) {
            *req.add_jobs() = Job("", i, run_at(i));
          }
          v1::SubmitBatchResponse res;
          s = stub->SubmitBatch(&ctx, req, &res);
        }
        mine.push_back(duration_cast<microseconds>(steady_clock::now() - t0).count());
        if (!s.ok()) {
          fprintf(stderr, "submit: %d %s\n", s.error_code(), s.error_message().c_str());
          failed = true;
        }
      }
      std::lock_guard lock(mu);
      latencies_us.insert(latencies_us.end(), mine.begin(), mine.end());
    });
  }
  for (auto& t : threads) t.join();
  if (failed) exit(1);
  SubmitResult r;
  r.jobs_per_s = jobs / duration<double>(steady_clock::now() - start).count();
  std::sort(latencies_us.begin(), latencies_us.end());
  if (!latencies_us.empty()) {
    r.p50_ms = latencies_us[latencies_us.size() / 2] / 1000.0;
    r.p99_ms = latencies_us[latencies_us.size() * 99 / 100] / 1000.0;
  }
  return r;
}

// A JobReceiver on 127.0.0.1 that answers OK at once and records when each
// job arrived and its due time. As cheap as gRPC allows, as http_load's
// receiver is for HTTP (the two share this machine's cores with delayd):
// the async API, one thread polling one completion queue, where the
// callback API would spend about half as much again per call on its own
// threads' wake-ups.
class Receiver {
 public:
  Receiver() {
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    b.RegisterService(&service_);
    cq_ = b.AddCompletionQueue();
    server_ = b.BuildAndStart();
    for (int i = 0; i < 256; ++i) Arm();
    poller_ = std::thread([this] { Poll(); });
  }
  ~Receiver() {
    server_->Shutdown(system_clock::now() + seconds(1));
    cq_->Shutdown();
    poller_.join();
  }
  std::string url() const { return "grpc://127.0.0.1:" + std::to_string(port_); }
  size_t count() {
    std::lock_guard lock(mu_);
    return hits_.size();
  }
  std::vector<Hit> hits() {
    std::lock_guard lock(mu_);
    return hits_;
  }

 private:
  struct Call {
    grpc::ServerContext ctx;
    v1::Delivery delivery;
    grpc::ServerAsyncResponseWriter<v1::Delivered> writer{&ctx};
    bool answered = false;
  };
  void Arm() {
    auto* c = new Call;
    service_.RequestDeliver(&c->ctx, &c->delivery, &c->writer, cq_.get(), cq_.get(), c);
  }
  void Poll() {
    void* tag = nullptr;
    bool ok = false;
    while (cq_->Next(&tag, &ok)) {
      auto* c = static_cast<Call*>(tag);
      if (c->answered || !ok) {  // finished, or the server shut down
        delete c;
        continue;
      }
      const int64_t at_us =
          duration_cast<microseconds>(system_clock::now().time_since_epoch()).count();
      const auto& due = c->delivery.due_at();
      {
        std::lock_guard lock(mu_);
        hits_.push_back({at_us, due.seconds() * 1000 + due.nanos() / 1'000'000});
      }
      Arm();
      c->answered = true;
      c->writer.Finish(v1::Delivered(), grpc::Status::OK, c);
    }
  }

  int port_ = 0;
  v1::JobReceiver::AsyncService service_;
  std::unique_ptr<grpc::ServerCompletionQueue> cq_;
  std::unique_ptr<grpc::Server> server_;
  std::thread poller_;
  std::mutex mu_;
  std::vector<Hit> hits_;
};

// The floor: a Jobs service whose Submit answers an empty job from a
// second thread, as delayd's listener answers from its event loop.
class Floor final : public v1::Jobs::CallbackService {
 public:
  Floor() : loop_([this] { Run(); }) {}
  grpc::ServerUnaryReactor* Submit(grpc::CallbackServerContext* ctx, const v1::SubmitRequest*,
                                   v1::SubmitResponse* res) override {
    auto* reactor = ctx->DefaultReactor();
    std::lock_guard lock(mu_);
    work_.push_back([reactor, res] {
      res->mutable_job()->set_id(1);
      reactor->Finish(grpc::Status::OK);
    });
    cv_.notify_one();
    return reactor;
  }

 private:
  void Run() {
    for (;;) {
      std::function<void()> f;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [this] { return !work_.empty(); });
        f = std::move(work_.front());
        work_.pop_front();
      }
      f();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> work_;
  std::thread loop_;
};

int ServeFloor() {
  Floor floor;
  grpc::ServerBuilder b;
  int port = 0;
  b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  b.RegisterService(&floor);
  std::unique_ptr<grpc::Server> server = b.BuildAndStart();
  if (!server || port == 0) return 1;
  printf("port %d\n", port);
  fflush(stdout);
  server->Wait();  // until killed
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: grpc_load submit|deliver --addr HOST:PORT [...] | floor\n");
    return 2;
  }
  const std::string mode = argv[1];
  if (mode == "floor") return ServeFloor();
  const char* addr_arg = ArgText(argc, argv, "--addr");
  const std::string addr = addr_arg ? addr_arg : "127.0.0.1:9090";
  if (mode == "submit") {
    const long jobs = Arg(argc, argv, "--jobs", 200000);
    const long batch = Arg(argc, argv, "--batch", 1000);
    const long conns = Arg(argc, argv, "--conns", 4);
    const auto steal0 = CpuSteal();
    const SubmitResult r =
        Submit(addr, "bench", jobs, batch, conns, [](long) { return std::optional<int64_t>(); });
    printf(
        "grpc submit jobs=%ld batch=%ld conns=%ld jobs_per_s=%.0f call_ms p50=%.2f p99=%.2f "
        "cpu_steal=%.1f%%\n",
        jobs, batch, conns, r.jobs_per_s, r.p50_ms, r.p99_ms, StealPct(steal0, CpuSteal()));
    return 0;
  }
  if (mode == "deliver") {
    const long jobs = Arg(argc, argv, "--jobs", 100000);
    const long lead_ms = Arg(argc, argv, "--lead-ms", 3000);
    Receiver rx;
    {
      auto topics = v1::Topics::NewStub(Channel(addr, 99));
      v1::PutTopicRequest put;
      put.set_name("push");
      put.mutable_settings()->mutable_target()->set_url(rx.url());
      grpc::ClientContext ctx;
      v1::Topic t;
      if (grpc::Status s = topics->Put(&ctx, put, &t); !s.ok()) {
        fprintf(stderr, "put topic: %s\n", s.error_message().c_str());
        return 1;
      }
    }
    const int64_t base = NowMs() + lead_ms;
    const SubmitResult sub = Submit(addr, "push", jobs, 1000, 4, [&](long i) {
      // Due times spread evenly over one second.
      return std::optional<int64_t>(base + i * 1000 / jobs);
    });
    const double steal_pct = WaitForDeliveries([&] { return rx.count(); }, jobs, base);
    if (steal_pct < 0) return 1;
    const Lateness l = Measure(rx.hits());
    printf(
        "grpc deliver jobs=%ld submit_per_s=%.0f deliveries_per_s=%.0f (over %.2f s) lateness_ms "
        "p50=%.2f p99=%.2f max=%.2f early=%ld cpu_steal=%.1f%%\n",
        jobs, sub.jobs_per_s, (jobs - 1) / l.span_s, l.span_s, l.p50_ms, l.p99_ms, l.max_ms,
        l.early, steal_pct);
    return 0;
  }
  fprintf(stderr, "unknown mode %s\n", mode.c_str());
  return 2;
}
