// Pull workers over HTTP: a reserve waits (long poll) for a job of the
// asked-for topics; a settle finishes, releases, buries or touches it.
#include <algorithm>
#include <boost/asio/post.hpp>

#include "engine/spec_json.h"
#include "http/api.h"
#include "http/api_util.h"
#include "http/job_json.h"

namespace delayd::http {

using nlohmann::json;

// Waits for one HTTP reserve: an engine client watching the asked-for topics
// for the request's duration. The won reservation moves to the engine's HTTP
// holder, so it outlives the request. If the client hangs up first, the
// waiter leaves at once, and a job it won meanwhile goes back to ready.
class PullWaiter final : public engine::ClientObserver,
                         public std::enable_shared_from_this<PullWaiter> {
 public:
  // `waiters` holds the waiter until it replies.
  PullWaiter(boost::asio::io_context& io, engine::Engine& engine, Handler::Reply reply,
             std::unordered_set<std::shared_ptr<PullWaiter>>& waiters)
      : io_(io), engine_(engine), reply_(std::move(reply)), waiters_(waiters) {}
  void Start(const std::vector<std::string>& topics, int64_t timeout_ms, Hangup& hangup) {
    waiters_.insert(shared_from_this());
    hangup.on_hangup = [weak = weak_from_this()] {
      if (auto self = weak.lock()) {
        Response r;
        r.status = 499;  // nginx's "client closed request"; nobody reads it
        self->Finish(std::move(r));
      }
    };
    client_ = engine_.Connect(this);
    for (const auto& t : topics) engine_.Watch(client_, t);
    if (std::find(topics.begin(), topics.end(), "default") == topics.end()) {
      (void)engine_.Ignore(client_, "default");
    }
    engine_.Reserve(client_, timeout_ms);
  }
  // The engine calls these from inside its own calls: act on the next turn.
  void OnReserved(const engine::JobView& job) override {
    boost::asio::post(io_, [self = shared_from_this(), id = job.id] {
      if (self->finished_) return;  // hung up: Finish gave the job back
      auto info = self->engine_.AdoptReservation(self->client_, id);
      self->Finish(info.ok() ? JsonTextResponse(200, RenderJob(*info))
                             : ProblemResponse(info.status()));
    });
  }
  void OnReserveTimedOut() override {
    boost::asio::post(io_, [self = shared_from_this()] {
      Response r;
      r.status = 204;
      self->Finish(std::move(r));
    });
  }
  void OnDeadlineSoon() override { OnReserveTimedOut(); }

  void Finish(Response r) {
    if (finished_) return;
    finished_ = true;
    engine_.Disconnect(client_);  // returns a job won but not adopted to ready
    reply_(std::move(r));
    waiters_.erase(shared_from_this());
  }

 private:
  boost::asio::io_context& io_;
  engine::Engine& engine_;
  Handler::Reply reply_;
  engine::Client* client_ = nullptr;
  std::unordered_set<std::shared_ptr<PullWaiter>>& waiters_;
  bool finished_ = false;
};

// ---------------------------------------------------------------- pull

void Api::Reserve(Call& c) {
  auto timeout = QueryInt(c.query, "timeout_ms", 0, options_.max_reserve_wait_ms, 0);
  if (!timeout.ok()) return c.reply(ProblemResponse(timeout.status()));
  std::vector<std::string> topics{c.params[0]};
  if (auto more = QueryValue(c.query, "topics")) {
    for (std::string_view t : Split(*more, ',')) {
      std::string name(t);
      Status s = CheckTopicName(name);
      if (!s.ok()) return c.reply(ProblemResponse(Status::InvalidField("topics", s.message())));
      if (std::find(topics.begin(), topics.end(), name) == topics.end()) topics.push_back(name);
    }
  }
  auto waiter = std::make_shared<PullWaiter>(io_, engine_, std::move(c.reply), waiters_);
  waiter->Start(topics, *timeout, *c.req.hangup);
}

void Api::EndLongPolls() {
  std::vector<std::shared_ptr<PullWaiter>> all(waiters_.begin(), waiters_.end());
  for (auto& w : all) w->Finish(ProblemResponse(Status::Unavailable("delayd is shutting down")));
}

void Api::Settle(Call& c, engine::Engine::Settle how) {
  auto id = ParseId(c.params[0], "job");
  if (!id.ok()) return c.reply(ProblemResponse(id.status()));
  auto body = ParseBody(c.req, false);
  if (!body.ok()) return c.reply(ProblemResponse(body.status()));
  if (!body->is_object()) {
    return c.reply(ProblemResponse(Status::InvalidField("body", "must be a JSON object")));
  }
  uint32_t lease = 0;
  int64_t delay_ms = 0;
  std::optional<uint32_t> priority;  // the job's own unless given
  for (auto& [k, v] : body->items()) {
    if (k == "lease") {
      if (!v.is_number_unsigned() || v.get<uint64_t>() == 0 || v.get<uint64_t>() > UINT32_MAX) {
        return c.reply(ProblemResponse(
            Status::InvalidField("lease", "must be the lease number from reserve")));
      }
      lease = v.get<uint32_t>();
    } else if (k == "priority" &&
               (how == engine::Engine::Settle::kRelease || how == engine::Engine::Settle::kBury)) {
      auto p = ParsePriority(v, "priority");
      if (!p.ok()) return c.reply(ProblemResponse(p.status()));
      priority = *p;
    } else if (k == "delay" && how == engine::Engine::Settle::kRelease) {
      auto ms = engine::ParseMillis(v, "delay");
      if (!ms.ok()) return c.reply(ProblemResponse(ms.status()));
      if (*ms > options_.limits.max_delay_ms) {
        return c.reply(
            ProblemResponse(Status::InvalidField("delay", "is longer than the longest delay")));
      }
      delay_ms = *ms;
    } else {
      return c.reply(ProblemResponse(Status::InvalidField(k, "unknown field")));
    }
  }
  if (how == engine::Engine::Settle::kBury && lease == 0) {
    // No lease: an operator's bury (of a job nobody holds, or held over HTTP).
    return engine_.BuryJob(*id, priority,
                           [this, id = *id, reply = std::move(c.reply)](const Status& s) {
                             if (!s.ok()) return reply(ProblemResponse(s));
                             ReplyJob(reply, id);
                           });
  }
  engine_.SettleHttp(*id, lease, how, priority, delay_ms,
                     [this, id = *id, how, reply = std::move(c.reply)](const Status& s) {
                       if (!s.ok()) return reply(ProblemResponse(s));
                       if (how == engine::Engine::Settle::kFinish) {
                         Response r;
                         r.status = 204;
                         return reply(std::move(r));
                       }
                       ReplyJob(reply, id);
                     });
}

}  // namespace delayd::http
