#include "rpc/listener.h"

#include <google/protobuf/util/json_util.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <deque>
#include <fstream>
#include <limits>
#include <mutex>
#include <optional>
#include <sstream>
#include <tuple>
#include <unordered_set>

#include "common/json_text.h"
#include "common/percent_encoding.h"
#include "delayd/v1/jobs.grpc.pb.h"
#include "delayd/v1/timers.grpc.pb.h"
#include "delayd/v1/topics.grpc.pb.h"
#include "rpc/status.h"
#include "rpc/transcode.h"

namespace delayd::rpc {

namespace pb = google::protobuf;
namespace v1 = delayd::v1;

namespace {

grpc::Status ShuttingDown() {
  return grpc::Status(grpc::StatusCode::UNAVAILABLE, "delayd is shutting down");
}

std::string JobPath(uint64_t id, std::string_view action = "") {
  std::string p = "/v1/jobs/" + std::to_string(id);
  if (!action.empty()) p.append("/").append(action);
  return p;
}

std::string TimerPath(uint64_t id, std::string_view action = "") {
  std::string p = "/v1/timers/" + std::to_string(id);
  if (!action.empty()) p.append("/").append(action);
  return p;
}

// A topic's route; `field` names the topic in the call's message.
Result<std::string> TopicPath(const std::string& topic, std::string_view rest = "",
                              const char* field = "topic") {
  if (topic.empty()) return Status::InvalidField(field, "is required");
  std::string p = "/v1/topics/" + PercentEncode(topic);
  if (!rest.empty()) p.append("/").append(rest);
  return p;
}

// `object` (a JSON object's text) with member `key` set to `raw`.
std::string WithMember(std::string object, std::string_view key, std::string_view raw) {
  object.pop_back();  // '}'
  if (object.size() > 1) object += ',';
  object.append("\"").append(key).append("\":").append(raw).append("}");
  return object;
}

Result<HttpCall> Call(std::string method, Result<std::string> path,
                      Result<std::string> body = std::string(), std::string query = "") {
  if (!path.ok()) return path.status();
  if (!body.ok()) return body.status();
  return HttpCall{std::move(method), std::move(*path), std::move(query), std::move(*body)};
}

// A GET of `path` whose query holds the request's fields but its `id`
// (List's filters, a count, a limit and cursor).
Result<HttpCall> GetWithQuery(Result<std::string> path, const pb::Message& m) {
  Result<std::string> obj = RequestJson(m, {"id"});
  if (!obj.ok()) return obj.status();
  const nlohmann::json j = nlohmann::json::parse(*obj);
  std::string q;
  for (const auto& [k, v] : j.items()) {
    if (!q.empty()) q += '&';
    q += PercentEncode(k) + "=" + PercentEncode(v.is_string() ? v.get<std::string>() : v.dump());
  }
  return Call("GET", std::move(path), std::string(), std::move(q));
}

// The HTTP API's name of a refused field as the call's message names it: the
// body's bytes are `body` (HTTP: body_base64); within `prefix`, the message
// the HTTP request's body stood for ("timer"), whole ("body") or an element
// ("jobs" and HTTP's "[3].key").
std::string FieldOfCall(std::string field, const std::string& prefix) {
  if (field.ends_with("body_base64"))
    field.resize(field.size() - std::string_view("_base64").size());
  if (prefix.empty() || field.empty()) return field;
  if (field.front() == '[') return prefix + field;
  return field == "body" ? prefix : prefix + "." + field;
}

// How an answer's JSON fills a response.
using Fill = std::function<Status(std::string_view json, pb::Message* out)>;

Status FillWhole(std::string_view json, pb::Message* out) { return FillFromJson(json, {out}); }

// A submission's answer: the job and `duplicate` side by side.
Status FillSubmitted(std::string_view json, v1::SubmitResponse* out) {
  return FillFromJson(json, {out, out->mutable_job()});
}

// A topic's answer: its settings side by side with its figures.
Status FillTopic(std::string_view json, v1::Topic* out) {
  return FillFromJson(json, {out, out->mutable_settings()});
}

}  // namespace

struct Listener::Impl {
  struct PendingCall {
    explicit PendingCall(grpc::ServerUnaryReactor* r) : reactor(r) {}
    grpc::ServerUnaryReactor* reactor;
    std::atomic<bool> done{false};
  };
  struct Stream;

  Impl(boost::asio::io_context& io_, http::Handler& api_, ListenerOptions options_)
      : io(io_), api(api_), options(options_) {}

  grpc::ServerUnaryReactor* Unary(grpc::CallbackServerContext* ctx, Result<HttpCall> call,
                                  pb::Message* out, Fill fill = FillWhole,
                                  std::string field_prefix = "");
  void Complete(const std::shared_ptr<PendingCall>& pc, const grpc::Status& s);
  static http::Request RequestOf(const std::string& authorization, HttpCall call);
  static std::string AuthorizationOf(const grpc::CallbackServerContext* ctx);
  // A unary call's request: its token and its W3C trace context metadata
  // (several values of one key joined with ',', as HTTP joins headers).
  static http::Request UnaryRequestOf(const grpc::CallbackServerContext* ctx, HttpCall call);

  boost::asio::io_context& io;
  http::Handler& api;
  ListenerOptions options;
  std::unique_ptr<grpc::Service> jobs, topics, timers;
  std::unique_ptr<grpc::Server> server;
  std::atomic<bool> stopping{false};
  mutable std::mutex mu;
  std::unordered_set<std::shared_ptr<PendingCall>> pending;  // under mu
  std::unordered_set<std::shared_ptr<Stream>> streams;       // loop thread only
};

std::string Listener::Impl::AuthorizationOf(const grpc::CallbackServerContext* ctx) {
  const auto& md = ctx->client_metadata();
  auto it = md.find("authorization");
  return it == md.end() ? std::string() : std::string(it->second.data(), it->second.size());
}

http::Request Listener::Impl::UnaryRequestOf(const grpc::CallbackServerContext* ctx,
                                             HttpCall call) {
  http::Request req = RequestOf(AuthorizationOf(ctx), std::move(call));
  const auto& md = ctx->client_metadata();
  for (auto [key, out] :
       {std::pair{"traceparent", &req.traceparent}, std::pair{"tracestate", &req.tracestate}}) {
    for (auto [it, end] = md.equal_range(key); it != end; ++it) {
      if (!out->empty()) *out += ',';
      out->append(it->second.data(), it->second.size());
    }
  }
  return req;
}

http::Request Listener::Impl::RequestOf(const std::string& authorization, HttpCall call) {
  http::Request req;
  req.method = std::move(call.method);
  req.path = std::move(call.path);
  req.query = std::move(call.query);
  req.authorization = authorization;
  if (!call.body.empty()) req.content_type = "application/json";
  req.body = std::move(call.body);
  return req;
}

grpc::ServerUnaryReactor* Listener::Impl::Unary(grpc::CallbackServerContext* ctx,
                                                Result<HttpCall> call, pb::Message* out, Fill fill,
                                                std::string field_prefix) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  if (!call.ok()) {
    reactor->Finish(ToGrpc(call.status()));
    return reactor;
  }
  auto pc = std::make_shared<PendingCall>(reactor);
  bool refused = false;
  {
    // Decided under the lock Stop takes: a call is either refused here or
    // waiting in `pending`, where Stop finds it; never both, never neither.
    std::lock_guard lock(mu);
    refused = stopping;
    if (!refused) pending.insert(pc);
  }
  if (refused) {
    reactor->Finish(ShuttingDown());
    return reactor;
  }
  boost::asio::post(
      io, [this, pc, ctx, out, fill = std::move(fill), field_prefix = std::move(field_prefix),
           req = UnaryRequestOf(ctx, std::move(*call))]() mutable {
        // gRPC marks a call cancelled when its deadline timer fires, which may
        // be after the deadline: both are looked at.
        if (ctx->deadline() <= std::chrono::system_clock::now()) {
          return Complete(pc, grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                                           "the deadline passed before delayd took the call up; "
                                           "nothing changed"));
        }
        if (ctx->IsCancelled()) {
          return Complete(pc, grpc::Status(grpc::StatusCode::CANCELLED,
                                           "the client left before delayd took the call up; "
                                           "nothing changed"));
        }
        api.Handle(std::move(req), [this, pc, out, fill = std::move(fill),
                                    field_prefix = std::move(field_prefix)](http::Response r) {
          if (pc->done) return;
          if (r.status >= 300) {
            Problem p = ProblemFromJson(r.status, r.body);
            p.field = FieldOfCall(p.field, field_prefix);
            return Complete(pc, ToGrpc(p));
          }
          Status s = r.body.empty() ? Status::Ok() : fill(r.body, out);
          Complete(pc, ToGrpc(s));
        });
      });
  return reactor;
}

void Listener::Impl::Complete(const std::shared_ptr<PendingCall>& pc, const grpc::Status& s) {
  if (pc->done.exchange(true)) return;
  {
    std::lock_guard lock(mu);
    pending.erase(pc);
  }
  pc->reactor->Finish(s);
}

// ---------------------------------------------------------------- Reserve

// One Reserve stream. The reactor (gRPC's) posts each event to the loop,
// where Stream keeps the state: the topics, the credit, the one long poll
// in flight, the jobs won and not yet written. Once the stream is finished
// nothing touches the reactor again (gRPC deletes it after OnDone).
class ReserveReactor;

struct Listener::Impl::Stream : std::enable_shared_from_this<Stream> {
  Stream(Impl& impl_, ReserveReactor* r_, std::string authorization_)
      : impl(impl_), r(r_), authorization(std::move(authorization_)) {}
  void Read(bool ok);
  void Pump();
  void Polled(http::Response res);
  void WriteNext();
  void Written(bool ok);
  // Ends the stream with `s` (at once, or once the write in flight is done).
  void End(const grpc::Status& s);
  void FinishNow();
  // Jobs won but never written go back to ready at once, not after their ttr.
  void ReleaseUnwritten();

  Impl& impl;
  ReserveReactor* r;
  const std::string authorization;
  v1::ReserveRequest in;  // the read buffer
  bool started = false;
  std::vector<std::string> topics;
  uint64_t credit = 0;
  bool read_closed = false;
  bool polling = false;
  std::shared_ptr<http::Hangup> hangup;
  std::deque<v1::ReservedJob> out;
  bool writing = false;
  std::optional<grpc::Status> ending;  // End was called: the status owed
  bool finished = false;               // the reactor's Finish was called
};

class ReserveReactor final : public grpc::ServerBidiReactor<v1::ReserveRequest, v1::ReservedJob> {
 public:
  ReserveReactor(Listener::Impl& impl, grpc::CallbackServerContext* ctx)
      : st_(std::make_shared<Listener::Impl::Stream>(impl, this,
                                                     Listener::Impl::AuthorizationOf(ctx))) {
    boost::asio::post(impl.io, [st = st_] {
      if (st->ending) return;  // cancelled before it got here
      if (st->impl.stopping) return st->End(ShuttingDown());
      st->impl.streams.insert(st);
      st->r->StartRead(&st->in);
    });
  }
  void OnReadDone(bool ok) override {
    boost::asio::post(st_->impl.io, [st = st_, ok] { st->Read(ok); });
  }
  void OnWriteDone(bool ok) override {
    boost::asio::post(st_->impl.io, [st = st_, ok] { st->Written(ok); });
  }
  void OnCancel() override {
    boost::asio::post(st_->impl.io, [st = st_] {
      st->End(grpc::Status(grpc::StatusCode::CANCELLED, "the client ended the stream"));
    });
  }
  void OnDone() override { delete this; }

 private:
  std::shared_ptr<Listener::Impl::Stream> st_;
};

void Listener::Impl::Stream::Read(bool ok) {
  if (ending) return;
  if (!ok) {
    // The worker asks for no more: the jobs owed are not looked for; those
    // won are written, then the stream ends.
    read_closed = true;
    if (polling && hangup->on_hangup) hangup->on_hangup();
    if (!writing && out.empty() && !polling) End(grpc::Status::OK);
    return;
  }
  if (!started) {
    if (in.topics().empty()) {
      return End(ToGrpc(Status::InvalidField("topics", "the first request names the topics")));
    }
    started = true;
    topics.assign(in.topics().begin(), in.topics().end());
  } else if (!in.topics().empty()) {
    return End(ToGrpc(Status::InvalidField("topics", "only the first request names topics")));
  }
  credit += in.credit();
  if (credit > impl.options.max_credit) {
    return End(ToGrpc(Status::InvalidField(
        "credit", "at most " + std::to_string(impl.options.max_credit) + " jobs may be owed")));
  }
  r->StartRead(&in);
  Pump();
}

void Listener::Impl::Stream::Pump() {
  if (ending || read_closed || polling || credit == 0) return;
  std::string query = "timeout_ms=" + std::to_string(impl.options.max_reserve_wait_ms);
  if (topics.size() > 1) {
    query += "&topics=";
    for (size_t i = 1; i < topics.size(); ++i) {
      if (i > 1) query += "%2C";
      query += PercentEncode(topics[i]);
    }
  }
  Result<std::string> path = TopicPath(topics[0], "reserve", "topics");
  if (!path.ok()) return End(ToGrpc(path.status()));
  http::Request req = RequestOf(authorization, HttpCall{"POST", *path, query, ""});
  hangup = req.hangup;
  polling = true;
  impl.api.Handle(std::move(req), [self = shared_from_this()](http::Response res) {
    self->Polled(std::move(res));
  });
}

void Listener::Impl::Stream::Polled(http::Response res) {
  polling = false;
  hangup.reset();
  if (res.status == 200) {
    v1::ReservedJob job;
    Status s = FillFromJson(res.body, {job.mutable_job()});
    if (!s.ok()) return End(ToGrpc(s));
    out.push_back(std::move(job));
    --credit;
    if (ending) return ReleaseUnwritten();
    WriteNext();
  } else if (ending || read_closed) {
    // Hung up by End or by the end of the worker's requests.
  } else if (res.status != 204) {
    return End(ToGrpc(ProblemFromJson(res.status, res.body)));
  }
  if (read_closed && !writing && out.empty()) return End(grpc::Status::OK);
  Pump();
}

void Listener::Impl::Stream::WriteNext() {
  if (writing || out.empty() || ending) return;
  writing = true;
  r->StartWrite(&out.front());
}

void Listener::Impl::Stream::Written(bool ok) {
  writing = false;
  out.pop_front();
  if (ending) {
    ReleaseUnwritten();
    return FinishNow();
  }
  if (!ok) return End(grpc::Status(grpc::StatusCode::CANCELLED, "the stream broke"));
  WriteNext();
  if (read_closed && !writing && out.empty() && !polling) End(grpc::Status::OK);
}

void Listener::Impl::Stream::End(const grpc::Status& s) {
  if (ending) return;
  ending = s;
  if (polling && hangup && hangup->on_hangup) hangup->on_hangup();
  if (writing) return;  // Written finishes
  ReleaseUnwritten();
  FinishNow();
}

void Listener::Impl::Stream::FinishNow() {
  if (finished) return;
  finished = true;
  impl.streams.erase(shared_from_this());
  r->Finish(*ending);
}

void Listener::Impl::Stream::ReleaseUnwritten() {
  const size_t keep = writing ? 1 : 0;
  while (out.size() > keep) {
    const v1::Job& job = out.back().job();
    http::Request req = RequestOf(
        authorization, HttpCall{"POST", JobPath(job.id(), "release"), "",
                                "{\"lease\":" + std::to_string(job.lease().lease()) + "}"});
    impl.api.Handle(std::move(req), [](http::Response) {});
    out.pop_back();
  }
}

// ---------------------------------------------------------------- services

namespace {

using Ctx = grpc::CallbackServerContext;
using Reactor = grpc::ServerUnaryReactor;

class JobsService final : public v1::Jobs::CallbackService {
 public:
  explicit JobsService(Listener::Impl& impl) : impl_(impl) {}

  Reactor* Submit(Ctx* ctx, const v1::SubmitRequest* req, v1::SubmitResponse* res) override {
    return impl_.Unary(ctx,
                       Call("POST", TopicPath(req->topic(), "jobs"), RequestJson(*req, {"topic"})),
                       res, [](std::string_view json, pb::Message* out) {
                         return FillSubmitted(json, static_cast<v1::SubmitResponse*>(out));
                       });
  }
  Reactor* SubmitBatch(Ctx* ctx, const v1::SubmitBatchRequest* req,
                       v1::SubmitBatchResponse* res) override {
    std::string body = "[";
    for (int i = 0; i < req->jobs_size(); ++i) {
      const std::string field = "jobs[" + std::to_string(i) + "]";
      const v1::SubmitRequest& job = req->jobs(i);
      if (!job.topic().empty() && job.topic() != req->topic()) {
        return impl_.Unary(ctx, Status::InvalidField(field + ".topic", "must be the batch's topic"),
                           res);
      }
      Result<std::string> text = RequestJson(job, {"topic"}, field);
      if (!text.ok()) return impl_.Unary(ctx, text.status(), res);
      if (i > 0) body += ',';
      body += *text;
    }
    body += ']';
    return impl_.Unary(
        ctx, Call("POST", TopicPath(req->topic(), "jobs"), std::move(body)), res,
        [](std::string_view json, pb::Message* out) {
          auto* batch = static_cast<v1::SubmitBatchResponse*>(out);
          for (std::string_view one : JsonElementTexts(json)) {
            if (Status s = FillSubmitted(one, batch->add_jobs()); !s.ok()) return s;
          }
          return Status::Ok();
        },
        "jobs");
  }
  Reactor* Get(Ctx* ctx, const v1::JobId* req, v1::Job* res) override {
    return impl_.Unary(ctx, Call("GET", JobPath(req->id())), res);
  }
  Reactor* GetByKey(Ctx* ctx, const v1::GetByKeyRequest* req, v1::Job* res) override {
    if (req->key().empty())
      return impl_.Unary(ctx, Status::InvalidField("key", "is required"), res);
    return impl_.Unary(
        ctx, Call("GET", TopicPath(req->topic(), "keys/" + PercentEncode(req->key()))), res);
  }
  Reactor* List(Ctx* ctx, const v1::ListJobsRequest* req, v1::ListJobsResponse* res) override {
    return impl_.Unary(ctx, GetWithQuery(std::string("/v1/jobs"), *req), res);
  }
  Reactor* Update(Ctx* ctx, const v1::UpdateRequest* req, v1::Job* res) override {
    Result<std::string> body = RequestJson(*req, {"id", "clear_target", "clear_retry"});
    for (auto [clear, set, name] : {std::tuple{req->clear_target(), req->has_target(), "target"},
                                    std::tuple{req->clear_retry(), req->has_retry(), "retry"}}) {
      if (!clear || !body.ok()) continue;
      if (set) {
        body = Status::InvalidField(std::string("clear_") + name,
                                    std::string("give either ") + name + " or clear_" + name);
      } else {
        body = WithMember(std::move(*body), name, "null");
      }
    }
    return impl_.Unary(ctx, Call("PATCH", JobPath(req->id()), std::move(body)), res);
  }
  Reactor* Cancel(Ctx* ctx, const v1::JobId* req, v1::Empty* res) override {
    return impl_.Unary(ctx, Call("DELETE", JobPath(req->id())), res);
  }
  Reactor* RunNow(Ctx* ctx, const v1::JobId* req, v1::Job* res) override {
    return impl_.Unary(ctx, Call("POST", JobPath(req->id(), "run-now")), res);
  }
  Reactor* Retry(Ctx* ctx, const v1::JobId* req, v1::Job* res) override {
    return impl_.Unary(ctx, Call("POST", JobPath(req->id(), "retry")), res);
  }
  Reactor* Kick(Ctx* ctx, const v1::JobId* req, v1::Job* res) override {
    return impl_.Unary(ctx, Call("POST", JobPath(req->id(), "kick")), res);
  }
  Reactor* Bury(Ctx* ctx, const v1::BuryRequest* req, v1::Job* res) override {
    return impl_.Unary(ctx, Call("POST", JobPath(req->id(), "bury"), RequestJson(*req, {"id"})),
                       res);
  }
  Reactor* Attempts(Ctx* ctx, const v1::JobId* req, v1::AttemptsResponse* res) override {
    return impl_.Unary(ctx, Call("GET", JobPath(req->id(), "attempts")), res);
  }
  grpc::ServerBidiReactor<v1::ReserveRequest, v1::ReservedJob>* Reserve(Ctx* ctx) override {
    return new ReserveReactor(impl_, ctx);
  }
  Reactor* Finish(Ctx* ctx, const v1::SettleRequest* req, v1::Empty* res) override {
    return impl_.Unary(ctx, Call("POST", JobPath(req->id(), "finish"), RequestJson(*req, {"id"})),
                       res);
  }
  Reactor* Release(Ctx* ctx, const v1::ReleaseRequest* req, v1::Job* res) override {
    return impl_.Unary(ctx, Call("POST", JobPath(req->id(), "release"), RequestJson(*req, {"id"})),
                       res);
  }
  Reactor* Touch(Ctx* ctx, const v1::SettleRequest* req, v1::Job* res) override {
    return impl_.Unary(ctx, Call("POST", JobPath(req->id(), "touch"), RequestJson(*req, {"id"})),
                       res);
  }

 private:
  Listener::Impl& impl_;
};

Status FillTopicAnswer(std::string_view json, pb::Message* out) {
  return FillTopic(json, static_cast<v1::Topic*>(out));
}

class TopicsService final : public v1::Topics::CallbackService {
 public:
  explicit TopicsService(Listener::Impl& impl) : impl_(impl) {}

  Reactor* List(Ctx* ctx, const v1::ListTopicsRequest*, v1::ListTopicsResponse* res) override {
    return impl_.Unary(ctx, Call("GET", std::string("/v1/topics")), res,
                       [](std::string_view json, pb::Message* out) {
                         auto* list = static_cast<v1::ListTopicsResponse*>(out);
                         auto topics = JsonMemberText(json, "topics");
                         for (std::string_view one : JsonElementTexts(topics.value_or("[]"))) {
                           if (Status s = FillTopic(one, list->add_topics()); !s.ok()) return s;
                         }
                         return Status::Ok();
                       });
  }
  Reactor* Get(Ctx* ctx, const v1::TopicName* req, v1::Topic* res) override {
    return impl_.Unary(ctx, Call("GET", TopicPath(req->name(), "", "name")), res, FillTopicAnswer);
  }
  Reactor* Put(Ctx* ctx, const v1::PutTopicRequest* req, v1::Topic* res) override {
    return impl_.Unary(
        ctx, Call("PUT", TopicPath(req->name(), "", "name"), RequestJson(req->settings())), res,
        FillTopicAnswer);
  }
  Reactor* Pause(Ctx* ctx, const v1::TopicName* req, v1::Topic* res) override {
    return impl_.Unary(ctx, Call("POST", TopicPath(req->name(), "pause", "name")), res,
                       FillTopicAnswer);
  }
  Reactor* Resume(Ctx* ctx, const v1::TopicName* req, v1::Topic* res) override {
    return impl_.Unary(ctx, Call("POST", TopicPath(req->name(), "resume", "name")), res,
                       FillTopicAnswer);
  }
  Reactor* Stats(Ctx* ctx, const v1::StatsRequest*, pb::Struct* res) override {
    return impl_.Unary(ctx, Call("GET", std::string("/v1/stats")), res,
                       [](std::string_view json, pb::Message* out) {
                         if (pb::util::JsonStringToMessage(std::string(json), out).ok()) {
                           return Status::Ok();
                         }
                         return Status::Internal("the stats do not fit google.protobuf.Struct");
                       });
  }

 private:
  Listener::Impl& impl_;
};

// A timer's fields the server sets; a request never sends them.
const std::vector<std::string_view> kTimerReadOnly = {"id", "next_fire_at", "last_fire_at",
                                                      "created_at"};

class TimersService final : public v1::Timers::CallbackService {
 public:
  explicit TimersService(Listener::Impl& impl) : impl_(impl) {}

  Reactor* Create(Ctx* ctx, const v1::Timer* req, v1::Timer* res) override {
    return impl_.Unary(
        ctx, Call("POST", std::string("/v1/timers"), RequestJson(*req, kTimerReadOnly)), res);
  }
  Reactor* Get(Ctx* ctx, const v1::TimerId* req, v1::Timer* res) override {
    return impl_.Unary(ctx, Call("GET", TimerPath(req->id())), res);
  }
  Reactor* List(Ctx* ctx, const v1::ListTimersRequest* req, v1::ListTimersResponse* res) override {
    return impl_.Unary(ctx, GetWithQuery(std::string("/v1/timers"), *req), res);
  }
  Reactor* Update(Ctx* ctx, const v1::UpdateTimerRequest* req, v1::Timer* res) override {
    // Only the fields named change (all that are set when none is named).
    std::vector<std::string_view> skip = kTimerReadOnly;
    if (!req->fields().empty()) {
      const pb::Descriptor* d = v1::Timer::descriptor();
      for (const std::string& name : req->fields()) {
        if (d->FindFieldByName(name) == nullptr ||
            std::find(kTimerReadOnly.begin(), kTimerReadOnly.end(), name) != kTimerReadOnly.end()) {
          return impl_.Unary(ctx,
                             Status::InvalidField(
                                 "fields", "a timer has no field " + name + " that can be changed"),
                             res);
        }
      }
      for (int i = 0; i < d->field_count(); ++i) {
        const std::string& name = d->field(i)->name();
        if (std::find(req->fields().begin(), req->fields().end(), name) == req->fields().end()) {
          skip.push_back(name);
        }
      }
    }
    return impl_.Unary(
        ctx, Call("PATCH", TimerPath(req->id()), RequestJson(req->timer(), skip, "timer")), res,
        FillWhole, "timer");
  }
  Reactor* Delete(Ctx* ctx, const v1::TimerId* req, v1::Empty* res) override {
    return impl_.Unary(ctx, Call("DELETE", TimerPath(req->id())), res);
  }
  Reactor* Pause(Ctx* ctx, const v1::TimerId* req, v1::Timer* res) override {
    return impl_.Unary(ctx, Call("POST", TimerPath(req->id(), "pause")), res);
  }
  Reactor* Resume(Ctx* ctx, const v1::TimerId* req, v1::Timer* res) override {
    return impl_.Unary(ctx, Call("POST", TimerPath(req->id(), "resume")), res);
  }
  Reactor* Next(Ctx* ctx, const v1::NextFiresRequest* req, v1::FireTimes* res) override {
    return impl_.Unary(ctx, GetWithQuery(TimerPath(req->id(), "next"), *req), res);
  }
  Reactor* Preview(Ctx* ctx, const v1::PreviewRequest* req, v1::FireTimes* res) override {
    Result<std::string> body = RequestJson(req->timer(), kTimerReadOnly, "timer");
    if (body.ok() && req->count() != 0) {
      body = WithMember(std::move(*body), "count", std::to_string(req->count()));
    }
    return impl_.Unary(ctx, Call("POST", std::string("/v1/timers/preview"), std::move(body)), res,
                       FillWhole, "timer");
  }
  Reactor* Fires(Ctx* ctx, const v1::FiresRequest* req, v1::FiresResponse* res) override {
    return impl_.Unary(ctx, GetWithQuery(TimerPath(req->id(), "fires"), *req), res);
  }

 private:
  Listener::Impl& impl_;
};

}  // namespace

// ---------------------------------------------------------------- listener

Listener::Listener(boost::asio::io_context& io, http::Handler& api, ListenerOptions options)
    : impl_(std::make_unique<Impl>(io, api, options)) {}

Listener::~Listener() { Stop(); }

Result<std::string> Listener::Listen(const std::string& address) {
  std::string addr = address;
  if (!addr.empty() && addr.front() == ':') addr = "127.0.0.1" + addr;
  const size_t colon = addr.rfind(':');
  if (colon == std::string::npos || colon + 1 == addr.size()) {
    return Status::InvalidArgument("--grpc " + address + ": expected HOST:PORT");
  }
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  impl_->jobs = std::make_unique<JobsService>(*impl_);
  impl_->topics = std::make_unique<TopicsService>(*impl_);
  impl_->timers = std::make_unique<TimersService>(*impl_);
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (const http::TlsFiles& tls = impl_->options.tls; !tls.cert.empty()) {
    auto read = [](const std::string& path, const char* what) -> Result<std::string> {
      std::ifstream in(path, std::ios::binary);
      std::stringstream text;
      if (!(in && text << in.rdbuf())) {
        return Status::InvalidArgument(std::string("gRPC TLS: cannot read the ") + what + " " +
                                       path);
      }
      return text.str();
    };
    grpc::SslServerCredentialsOptions ssl(
        tls.client_ca.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                              : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    auto cert = read(tls.cert, "certificate");
    if (!cert.ok()) return cert.status();
    auto key = read(tls.key, "key");
    if (!key.ok()) return key.status();
    ssl.pem_key_cert_pairs.push_back({*key, *cert});
    if (!tls.client_ca.empty()) {
      auto ca = read(tls.client_ca, "client CA");
      if (!ca.ok()) return ca.status();
      ssl.pem_root_certs = *ca;
    }
    credentials = grpc::SslServerCredentials(ssl);
  }
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(addr, credentials, &port);
  builder.SetMaxReceiveMessageSize(static_cast<int>(
      std::min<size_t>(impl_->options.max_message_bytes, std::numeric_limits<int>::max())));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                             impl_->options.max_streams_per_connection);
  // Memory for connections and messages is bounded; past it gRPC refuses
  // (RESOURCE_EXHAUSTED) rather than growing.
  grpc::ResourceQuota quota("delayd-grpc");
  quota.Resize(256 << 20);
  builder.SetResourceQuota(quota);
  builder.RegisterService(impl_->jobs.get());
  builder.RegisterService(impl_->topics.get());
  builder.RegisterService(impl_->timers.get());
  impl_->server = builder.BuildAndStart();
  if (!impl_->server || port == 0) {
    impl_->server.reset();
    return Status::Unavailable("--grpc " + address + ": cannot listen there");
  }
  return addr.substr(0, colon) + ":" + std::to_string(port);
}

void Listener::BeginShutdown() {
  {
    std::lock_guard lock(impl_->mu);
    impl_->stopping = true;
  }
  if (!impl_->server) return;
  if (auto* health = impl_->server->GetHealthCheckService()) health->SetServingStatus(false);
  std::vector<std::shared_ptr<Impl::Stream>> all(impl_->streams.begin(), impl_->streams.end());
  for (auto& s : all) s->End(ShuttingDown());
}

size_t Listener::busy() const {
  std::lock_guard lock(impl_->mu);
  return impl_->pending.size();
}

void Listener::Stop() {
  if (!impl_->server) return;
  // The loop has stopped: what still waits for it is answered here.
  std::vector<std::shared_ptr<Impl::PendingCall>> calls;
  {
    std::lock_guard lock(impl_->mu);
    impl_->stopping = true;
    calls.assign(impl_->pending.begin(), impl_->pending.end());
  }
  for (auto& pc : calls) impl_->Complete(pc, ShuttingDown());
  std::vector<std::shared_ptr<Impl::Stream>> all(impl_->streams.begin(), impl_->streams.end());
  for (auto& s : all) {
    if (!s->ending) s->ending = ShuttingDown();
    s->FinishNow();
  }
  impl_->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  impl_->server.reset();
}

}  // namespace delayd::rpc
