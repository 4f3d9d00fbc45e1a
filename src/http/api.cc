#include "http/api.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <boost/asio/post.hpp>
#include <charconv>
#include <random>

#include "common/json_dump.h"
#include "common/json_text.h"
#include "common/time_format.h"
#include "delivery/dispatcher.h"
#include "engine/spec_json.h"
#include "http/access.h"
#include "http/api_util.h"
#include "http/bulk_ops.h"

namespace delayd::http {

using nlohmann::json;

namespace {

std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (;;) {
    size_t end = s.find(sep, start);
    out.push_back(s.substr(start, end - start));
    if (end == s.npos) return out;
    start = end + 1;
  }
}

// Percent-decoding; `plus` turns '+' into a space (query strings).
std::optional<std::string> Decode(std::string_view s, bool plus) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%') {
      if (i + 2 >= s.size()) return std::nullopt;
      int v = 0;
      auto [p, ec] = std::from_chars(s.data() + i + 1, s.data() + i + 3, v, 16);
      if (ec != std::errc() || p != s.data() + i + 3) return std::nullopt;
      out += static_cast<char>(v);
      i += 2;
    } else if (plus && s[i] == '+') {
      out += ' ';
    } else {
      out += s[i];
    }
  }
  return out;
}

// Matches `path` against a route pattern, collecting its parameters.
bool Match(std::string_view pattern, std::string_view path, std::vector<std::string>* params) {
  auto ps = Split(pattern, '/');
  auto xs = Split(path, '/');
  if (ps.size() != xs.size()) return false;
  std::vector<std::string> found;
  for (size_t i = 0; i < ps.size(); ++i) {
    if (!ps[i].empty() && ps[i].front() == '{') {
      auto v = Decode(xs[i], false);
      if (!v || v->empty()) return false;
      found.push_back(std::move(*v));
    } else if (ps[i] != xs[i]) {
      return false;
    }
  }
  *params = std::move(found);
  return true;
}

// The one map from a status to its HTTP answer.
struct ProblemKind {
  int http;
  const char* slug;
  const char* title;
};

ProblemKind KindOf(StatusCode c) {
  switch (c) {
    case StatusCode::kOk:
      return {200, "ok", "OK"};
    case StatusCode::kNotFound:
      return {404, "not-found", "Not found"};
    case StatusCode::kInvalidArgument:
      return {400, "invalid-request", "Invalid request"};
    case StatusCode::kConflict:
      return {409, "conflict", "Conflict with the job's state"};
    case StatusCode::kUnavailable:
    case StatusCode::kFenced:  // this node no longer owns the shard: another node will
      return {503, "unavailable", "Unavailable, try again later"};
    case StatusCode::kIoError:  // the store failed: nothing was applied; retry later
      return {503, "storage-unavailable",
              "Storage unavailable, nothing was changed; try again later"};
    case StatusCode::kNoSpace:
      return {503, "storage-full",
              "Storage full, nothing was changed; try again once space returns"};
    case StatusCode::kUnknown:  // look the jobs up before submitting again
      return {503, "outcome-unknown",
              "The store's connection broke during the commit; the jobs may have been kept"};
    case StatusCode::kInternal:
      break;
  }
  return {500, "internal", "Internal error"};
}

Response Problem(int status, const char* slug, const std::string& title, const std::string& detail,
                 const std::string& field = "") {
  json j = {{"type", std::string("https://delayd.dev/problems/") + slug},
            {"title", title},
            {"status", status},
            {"detail", detail}};
  if (!field.empty()) j["field"] = field;
  Response r;
  r.status = status;
  r.content_type = "application/problem+json";
  r.body = DumpJson(j);
  return r;
}

}  // namespace

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

Response JsonResponse(int status, const json& body) {
  return JsonTextResponse(status, DumpJson(body));
}

Response JsonTextResponse(int status, std::string text) {
  Response r;
  r.status = status;
  r.body = std::move(text);
  return r;
}

Response ProblemResponse(const Status& s) {
  ProblemKind k = KindOf(s.code());
  if (s.code() == StatusCode::kIoError || s.code() == StatusCode::kNoSpace ||
      s.code() == StatusCode::kInternal) {
    // The store's own words (SQL, file names) stay in the log; the client
    // gets an id to find them by.
    const std::string id = NewRequestId();
    spdlog::warn("request {}: {}", id, s.message());
    Response r = Problem(k.http, k.slug, k.title,
                         std::string(k.title) + " (request " + id + " in the server's log)");
    r.headers.emplace_back("Delayd-Request-Id", id);
    return r;
  }
  if (s.code() == StatusCode::kUnknown) {
    // The ids to look up (GET /v1/jobs/{id}) before submitting again; a
    // resubmission without a key could otherwise make a second job.
    json j = {{"type", "https://delayd.dev/problems/outcome-unknown"},
              {"title", k.title},
              {"status", k.http},
              {"detail", s.message()},
              {"job_ids", json::array()}};
    for (std::string_view rest = s.field(); !rest.empty();) {
      const size_t comma = rest.find(',');
      uint64_t id = 0;
      std::from_chars(rest.data(), rest.data() + std::min(comma, rest.size()), id);
      if (id != 0) j["job_ids"].push_back(id);
      rest = comma == rest.npos ? std::string_view() : rest.substr(comma + 1);
    }
    Response r;
    r.status = k.http;
    r.content_type = "application/problem+json";
    r.body = DumpJson(j);
    return r;
  }
  return Problem(k.http, k.slug, k.title, s.message(), s.field());
}

std::string NewRequestId() {
  static std::atomic<uint64_t> next{0};
  static const uint64_t base = [] {
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32 | rd()) & 0xffffff000000ULL;
  }();
  return fmt::format("{:012x}", base + next.fetch_add(1) % 0x1000000);
}

// The routes: method, path pattern and handler, in one table. The first
// pattern that matches the path decides; a path matched with another method
// is a 405.
const std::vector<Api::Route>& Api::Table() {
  using S = engine::Engine::Settle;
  static const std::vector<Route> table = {
      {{"GET", "/healthz"},
       [](Api&, Call& c) {
         c.reply(JsonResponse(200, {{"status", "ok"}}));
       }},
      {{"GET", "/readyz"}, [](Api& a, Call& c) { a.Ready(c); }},
      {{"GET", "/"}, [](Api& a, Call& c) { a.ConsoleFile(c, "index.html"); }},
      {{"GET", "/console/{file}"}, [](Api& a, Call& c) { a.ConsoleFile(c, c.params[0]); }},
      {{"GET", "/metrics"}, [](Api& a, Call& c) { a.MetricsPage(c); }},
      {{"GET", "/v1/openapi.json"},
       [](Api&, Call& c) {
         c.reply(Response{200, "application/json", {}, OpenApiDocument()});
       }},
      {{"GET", "/v1/stats"}, [](Api& a, Call& c) { a.Stats(c); }},
      {{"GET", "/v1/forecast"}, [](Api& a, Call& c) { a.Forecast(c); }},
      {{"GET", "/v1/cluster"},
       [](Api& a, Call& c) {
         if (!a.options_.cluster_view) {
           return c.reply(ProblemResponse(
               Status::NotFound("not a cluster node (delayd runs with --cluster for that)")));
         }
         a.options_.cluster_view([reply = std::move(c.reply)](Result<nlohmann::json> view) {
           if (!view.ok()) return reply(ProblemResponse(view.status()));
           reply(JsonResponse(200, *view));
         });
       }},
      {{"POST", "/v1/topics/{topic}/jobs"}, [](Api& a, Call& c) { a.SubmitJobs(c); }},
      {{"GET", "/v1/topics/{topic}/keys/{key}"}, [](Api& a, Call& c) { a.GetByKey(c); }},
      {{"POST", "/v1/topics/{topic}/reserve"}, [](Api& a, Call& c) { a.Reserve(c); }},
      {{"GET", "/v1/topics"}, [](Api& a, Call& c) { a.ListTopics(c); }},
      {{"GET", "/v1/topics/{topic}"}, [](Api& a, Call& c) { a.GetTopic(c); }},
      {{"PUT", "/v1/topics/{topic}"}, [](Api& a, Call& c) { a.PutTopic(c); }},
      {{"POST", "/v1/topics/{topic}/pause"}, [](Api& a, Call& c) { a.PauseTopic(c, true); }},
      {{"POST", "/v1/topics/{topic}/resume"}, [](Api& a, Call& c) { a.PauseTopic(c, false); }},
      {{"GET", "/v1/jobs"}, [](Api& a, Call& c) { a.ListJobs(c); }},
      {{"GET", "/v1/jobs/{id}"}, [](Api& a, Call& c) { a.GetJob(c); }},
      {{"PATCH", "/v1/jobs/{id}"}, [](Api& a, Call& c) { a.PatchJob(c); }},
      {{"DELETE", "/v1/jobs/{id}"}, [](Api& a, Call& c) { a.DeleteJob(c); }},
      {{"POST", "/v1/jobs/{id}/run-now"}, [](Api& a, Call& c) { a.Action(c, "run-now"); }},
      {{"POST", "/v1/jobs/{id}/kick"}, [](Api& a, Call& c) { a.Action(c, "kick"); }},
      {{"POST", "/v1/jobs/{id}/retry"}, [](Api& a, Call& c) { a.Action(c, "retry"); }},
      {{"POST", "/v1/jobs/{id}/finish"}, [](Api& a, Call& c) { a.Settle(c, S::kFinish); }},
      {{"POST", "/v1/jobs/{id}/release"}, [](Api& a, Call& c) { a.Settle(c, S::kRelease); }},
      {{"POST", "/v1/jobs/{id}/bury"}, [](Api& a, Call& c) { a.Settle(c, S::kBury); }},
      {{"POST", "/v1/jobs/{id}/touch"}, [](Api& a, Call& c) { a.Settle(c, S::kTouch); }},
      {{"GET", "/v1/jobs/{id}/attempts"}, [](Api& a, Call& c) { a.Attempts(c); }},
      {{"GET", "/v1/dead-letters"}, [](Api& a, Call& c) { a.DeadLetterGroups(c); }},
      {{"POST", "/v1/bulk"}, [](Api& a, Call& c) { a.StartBulk(c); }},
      {{"GET", "/v1/bulk"}, [](Api& a, Call& c) { a.ListBulk(c); }},
      {{"GET", "/v1/bulk/{id}"}, [](Api& a, Call& c) { a.GetBulk(c); }},
      {{"POST", "/v1/bulk/{id}/stop"}, [](Api& a, Call& c) { a.StopBulk(c); }},
      {{"POST", "/v1/timers/preview"}, [](Api& a, Call& c) { a.PreviewTimer(c); }},
      {{"POST", "/v1/timers"}, [](Api& a, Call& c) { a.CreateTimer(c); }},
      {{"GET", "/v1/timers"}, [](Api& a, Call& c) { a.ListTimers(c); }},
      {{"GET", "/v1/timers/{id}"}, [](Api& a, Call& c) { a.GetTimer(c); }},
      {{"PATCH", "/v1/timers/{id}"}, [](Api& a, Call& c) { a.PatchTimer(c); }},
      {{"DELETE", "/v1/timers/{id}"}, [](Api& a, Call& c) { a.DeleteTimer(c); }},
      {{"POST", "/v1/timers/{id}/pause"}, [](Api& a, Call& c) { a.SetTimerActive(c, false); }},
      {{"POST", "/v1/timers/{id}/resume"}, [](Api& a, Call& c) { a.SetTimerActive(c, true); }},
      {{"GET", "/v1/timers/{id}/next"}, [](Api& a, Call& c) { a.NextFires(c); }},
      {{"GET", "/v1/timers/{id}/fires"}, [](Api& a, Call& c) { a.TimerFires(c); }},
  };
  return table;
}

const std::vector<RouteSpec>& Api::Routes() {
  static const std::vector<RouteSpec> specs = [] {
    std::vector<RouteSpec> out;
    for (const Route& r : Table()) out.push_back(r.spec);
    return out;
  }();
  return specs;
}

Api::Api(boost::asio::io_context& io, engine::Engine& engine, const Clock& clock,
         delivery::Dispatcher* dispatcher, std::function<json()> server_stats, ApiOptions options,
         timer::TimerService* timers)
    : io_(io),
      engine_(engine),
      clock_(clock),
      dispatcher_(dispatcher),
      server_stats_(std::move(server_stats)),
      options_(std::move(options)),
      timers_(timers),
      bulk_(std::make_unique<BulkOps>(io, engine, clock)) {}

Api::~Api() = default;

void Api::Handle(Request req, Reply reply) {
  // The browser's defences first: they hold with and without a token.
  for (auto check : {&CheckHost, &CheckOrigin}) {
    if (auto refused = check(req, options_.access)) {
      return reply(Problem(refused->status, refused->slug, refused->title, refused->detail));
    }
  }
  if (auto refused = CheckContentType(req)) {
    return reply(Problem(refused->status, refused->slug, refused->title, refused->detail));
  }
  // A read-only console's pages may not act, whatever token they hold: a
  // page sends its Origin (its own, having passed CheckOrigin) with every
  // request that changes something; delayctl and scripts send none.
  if (options_.console == ConsoleMode::kReadOnly && !req.origin.empty() &&
      !ReadOnlyMethod(req.method)) {
    return reply(Problem(403, "console-read-only", "Forbidden",
                         "the console is read-only on this server (--console read-only)"));
  }
  const bool needs_token =
      req.path.rfind("/v1/", 0) == 0 || (req.path == "/metrics" && options_.metrics_need_token);
  if (needs_token) {
    const Scope scope = ScopeOf(req, options_.access);
    if (scope == Scope::kNone) {
      Response r = Problem(401, "unauthorized", "Unauthorized",
                           "this route needs the header Authorization: Bearer <api token>");
      r.headers.emplace_back("WWW-Authenticate", "Bearer");
      return reply(std::move(r));
    }
    if (scope == Scope::kRead && !ReadOnlyMethod(req.method)) {
      Response r =
          Problem(403, "insufficient-scope", "Forbidden",
                  "the read-only token may only read; " + req.method + " needs the API token");
      r.headers.emplace_back("WWW-Authenticate", "Bearer error=\"insufficient_scope\"");
      return reply(std::move(r));
    }
  }
  bool path_known = false;
  for (const Route& route : Table()) {
    Params params;
    if (!Match(route.spec.pattern, req.path, &params)) continue;
    path_known = true;
    if (req.method != route.spec.method) continue;
    if (options_.metrics != nullptr) reply = Timed(route.spec, std::move(reply));
    Call c{std::move(req), std::move(params), {}, std::move(reply)};
    if (!c.req.query.empty()) {
      for (std::string_view part : Split(c.req.query, '&')) {
        if (part.empty()) continue;
        size_t eq = part.find('=');
        auto k = Decode(part.substr(0, eq), true);
        auto v = Decode(eq == part.npos ? "" : part.substr(eq + 1), true);
        if (!k || !v) {
          return c.reply(ProblemResponse(Status::InvalidField("query", "bad percent-encoding")));
        }
        c.query.emplace_back(std::move(*k), std::move(*v));
      }
    }
    return Dispatch(route, c);
  }
  if (path_known) {
    return reply(Problem(405, "method-not-allowed", "Method not allowed",
                         req.method + " is not allowed on " + req.path));
  }
  reply(Problem(404, "not-found", "Not found", "no route " + req.path));
}

Handler::Reply Api::Timed(const RouteSpec& spec, Reply reply) {
  Histogram& h = options_.metrics->HttpRoute(std::string(spec.method) + " " + spec.pattern);
  return [&h, &clock = clock_, started_us = clock_.SteadyMicros(),
          reply = std::move(reply)](Response r) {
    h.ObserveMicros(clock.SteadyMicros() - started_us);
    reply(std::move(r));
  };
}

// The console's files need no token: they hold no data, and the page asks
// for the token itself once the API answers 401.
void Api::ConsoleFile(Call& c, std::string_view name) {
  if (options_.console == ConsoleMode::kOff) {
    return c.reply(ProblemResponse(Status::NotFound("the console is off on this server")));
  }
  Response r;
  r.headers.emplace_back("Content-Security-Policy",
                         "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'");
  r.headers.emplace_back("X-Content-Type-Options", "nosniff");
  r.headers.emplace_back("Cache-Control", "no-cache");
  if (name == "config.json") {
    // Read-only for everyone, or for whoever holds the read-only token.
    const bool read_only =
        options_.console == ConsoleMode::kReadOnly ||
        (!options_.access.read_token.empty() && ScopeOf(c.req, options_.access) == Scope::kRead);
    r.body = DumpJson({{"mode", read_only ? "read-only" : "full"}, {"version", options_.version}});
    return c.reply(std::move(r));
  }
  for (const ConsoleAsset& a : ConsoleAssets()) {
    if (a.name != name) continue;
    r.content_type = std::string(a.content_type);
    r.body = std::string(a.body);
    return c.reply(std::move(r));
  }
  c.reply(ProblemResponse(Status::NotFound("no console file " + std::string(name))));
}

void Api::Ready(Call& c) {
  auto answer = [this, reply = std::move(c.reply)](const std::string& why) {
    if (!why.empty()) return reply(Problem(503, "not-ready", "Not ready", why));
    json j = {{"status", "ready"}};
    // Ready, but an operator should look: rows the engine left in the store.
    if (uint64_t n = engine_.unsound_rows(); n > 0) {
      j["unsound_rows"] = n;
      j["detail"] =
          std::to_string(n) + " stored job rows were left out of memory as unsound (see the log)";
    }
    reply(JsonResponse(200, j));
  };
  if (!options_.not_ready) return answer("");
  options_.not_ready(std::move(answer));
}

void Api::Dispatch(const Route& route, Call& c) {
  const std::string_view pattern = route.spec.pattern;
  if (pattern.rfind("/v1/topics/{topic}", 0) == 0) {
    Status s = CheckTopicName(c.params[0]);
    if (!s.ok()) return c.reply(ProblemResponse(s));
  }
  if (pattern.rfind("/v1/timers", 0) == 0 && timers_ == nullptr) {
    return c.reply(ProblemResponse(Status::Unavailable("timers are not running on this server")));
  }
  route.handle(*this, c);
}

void Api::ReplyJob(const Reply& reply, uint64_t id, int status) {
  engine_.GetJob(id, [reply, status](Result<engine::JobInfo> info) {
    if (!info.ok()) return reply(ProblemResponse(info.status()));
    reply(JsonTextResponse(status, RenderJob(*info)));
  });
}

// ---------------------------------------------------------------- jobs

void Api::SubmitJobs(Call& c) {
  auto body = ParseBody(c.req, true);
  if (!body.ok()) return c.reply(ProblemResponse(body.status()));
  const bool batch = body->is_array();
  if (batch && body->empty()) {
    return c.reply(ProblemResponse(Status::InvalidField("body", "a batch holds at least one job")));
  }
  if (batch && body->size() > options_.max_batch) {
    return c.reply(ProblemResponse(Status::InvalidField(
        "body", "a batch holds at most " + std::to_string(options_.max_batch) + " jobs")));
  }
  // A delay counts from the next whole ms: from the current one, rounded
  // down, a job would be due up to 1 ms before its delay has passed.
  const int64_t now_ms = (clock_.WallMicros() + 999) / 1000;
  std::vector<engine::NewJob> jobs;
  if (batch) {
    const std::vector<std::string_view> texts = JsonElementTexts(c.req.body);
    for (size_t i = 0; i < body->size(); ++i) {
      auto n = ParseNewJob((*body)[i], texts.at(i), "[" + std::to_string(i) + "]", options_.limits,
                           now_ms);
      if (!n.ok()) return c.reply(ProblemResponse(n.status()));
      jobs.push_back(std::move(*n));
    }
  } else {
    auto n = ParseNewJob(*body, c.req.body, "", options_.limits, now_ms);
    if (!n.ok()) return c.reply(ProblemResponse(n.status()));
    jobs.push_back(std::move(*n));
  }
  engine_.Submit(
      c.params[0], std::move(jobs),
      [this, batch, reply = std::move(c.reply)](Result<std::vector<engine::Submitted>> r) {
        if (!r.ok()) return reply(ProblemResponse(r.status()));
        std::vector<uint64_t> ids;
        for (const engine::Submitted& s : *r) ids.push_back(s.id);
        // New jobs are still in memory; a duplicate's job may have to be read.
        engine_.GetJobs(std::move(ids), [batch, reply, submitted = std::move(r).value()](
                                            std::vector<Result<engine::JobInfo>> infos) {
          std::string out;
          out.reserve(infos.size() * 512);  // a job renders to ~400 bytes plus its body
          JsonWriter w(out);
          if (batch) w.BeginArray();
          bool any_new = false, all_dup = true;
          for (size_t i = 0; i < infos.size(); ++i) {
            if (!infos[i].ok()) return reply(ProblemResponse(infos[i].status()));
            w.BeginObject();
            WriteJobFields(w, *infos[i]);
            w.Key("duplicate").Bool(submitted[i].duplicate);
            w.EndObject();
            any_new = any_new || !submitted[i].duplicate;
            all_dup = all_dup && submitted[i].duplicate;
          }
          if (batch) w.EndArray();
          Response res = JsonTextResponse(any_new ? 201 : 200, std::move(out));
          if (!batch) {
            res.headers.emplace_back("Location", "/v1/jobs/" + std::to_string(submitted[0].id));
          }
          if (all_dup) res.headers.emplace_back("Delayd-Duplicate", "true");
          reply(std::move(res));
        });
      });
}

void Api::GetJob(Call& c) {
  auto id = ParseId(c.params[0], "job");
  if (!id.ok()) return c.reply(ProblemResponse(id.status()));
  ReplyJob(c.reply, *id);
}

void Api::GetByKey(Call& c) {
  engine_.GetByKey(c.params[0], c.params[1],
                   [reply = std::move(c.reply)](Result<engine::JobInfo> info) {
                     if (!info.ok()) return reply(ProblemResponse(info.status()));
                     reply(JsonTextResponse(200, RenderJob(*info)));
                   });
}

void Api::PatchJob(Call& c) {
  auto id = ParseId(c.params[0], "job");
  if (!id.ok()) return c.reply(ProblemResponse(id.status()));
  auto body = ParseBody(c.req, true);
  if (!body.ok()) return c.reply(ProblemResponse(body.status()));
  auto patch =
      ParseJobPatch(*body, c.req.body, options_.limits, (clock_.WallMicros() + 999) / 1000);
  if (!patch.ok()) return c.reply(ProblemResponse(patch.status()));
  engine_.Modify(*id, *patch, [this, id = *id, reply = std::move(c.reply)](const Status& s) {
    if (!s.ok()) return reply(ProblemResponse(s));
    ReplyJob(reply, id);
  });
}

void Api::DeleteJob(Call& c) {
  auto id = ParseId(c.params[0], "job");
  if (!id.ok()) return c.reply(ProblemResponse(id.status()));
  engine_.Remove(*id, [reply = std::move(c.reply)](const Status& s) {
    if (!s.ok()) return reply(ProblemResponse(s));
    Response r;
    r.status = 204;
    reply(std::move(r));
  });
}

void Api::ListJobs(Call& c) {
  auto filter = ParseListFilter(c.query, {"limit", "cursor"});
  if (!filter.ok()) return c.reply(ProblemResponse(filter.status()));
  engine::ListFilter& f = *filter;
  auto limit = QueryInt(c.query, "limit", 1, 1000, 100);
  if (!limit.ok()) return c.reply(ProblemResponse(limit.status()));
  f.limit = static_cast<size_t>(*limit);
  auto cursor = QueryInt(c.query, "cursor", 0, INT64_MAX, 0);
  if (!cursor.ok()) return c.reply(ProblemResponse(cursor.status()));
  f.after_id = static_cast<uint64_t>(*cursor);
  engine_.List(f, [reply = std::move(c.reply)](Result<engine::ListPage> page) {
    if (!page.ok()) return reply(ProblemResponse(page.status()));
    std::string out;
    JsonWriter w(out);
    w.BeginObject().Key("jobs").BeginArray();
    for (const auto& info : page->jobs) {
      w.BeginObject();
      WriteJobFields(w, info);
      w.EndObject();
    }
    w.EndArray().Key("next_cursor");
    page->next_cursor ? w.String(std::to_string(page->next_cursor)) : w.Null();
    w.EndObject();
    reply(JsonTextResponse(200, std::move(out)));
  });
}

void Api::Action(Call& c, const std::string& action) {
  auto id = ParseId(c.params[0], "job");
  if (!id.ok()) return c.reply(ProblemResponse(id.status()));
  auto then = [this, id = *id, reply = std::move(c.reply)](const Status& s) {
    if (!s.ok()) return reply(ProblemResponse(s));
    ReplyJob(reply, id);
  };
  if (action == "run-now") return engine_.RunNow(*id, std::move(then));
  if (action == "kick") return engine_.KickJob(*id, std::move(then));
  engine_.Retry(*id, std::move(then));
}

void Api::Attempts(Call& c) {
  auto id = ParseId(c.params[0], "job");
  if (!id.ok()) return c.reply(ProblemResponse(id.status()));
  engine_.GetJob(*id, [id = *id, reply = std::move(c.reply)](Result<engine::JobInfo> info) {
    if (!info.ok()) return reply(ProblemResponse(info.status()));
    json out = json::array();
    for (const engine::Attempt& a : engine::ReadAttempts(info->record.attempt_log)) {
      out.push_back({{"attempt", a.number},
                     {"started_at", FormatRfc3339Ms(a.started_ms)},
                     {"duration_ms", a.duration_ms},
                     {"outcome", engine::OutcomeName(a.outcome)},
                     {"http_status", a.http_status != 0 ? json(a.http_status) : json(nullptr)},
                     {"error", a.error.empty() ? json(nullptr) : json(a.error)}});
    }
    reply(JsonResponse(200, {{"job_id", id}, {"attempts", std::move(out)}}));
  });
}

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

// ---------------------------------------------------------------- topics

json Api::RenderTopic(const engine::TopicInfo& t) const {
  json j = t.settings ? engine::ToJson(*t.settings, false)
                      : engine::ToJson(engine::TopicSettings{}, false);
  j["name"] = t.name;
  j["paused"] = t.paused;
  j["counts"] = {{"ready", t.ready},
                 {"delayed", t.delayed},
                 {"reserved", t.reserved},
                 {"buried", t.buried},
                 {"total_jobs", t.total_jobs}};
  j["pause_left_ms"] = t.pause_left_ms;
  // How late the longest-waiting ready job is: rate limits and busy
  // consumers show here.
  j["ready_lateness_ms"] =
      t.oldest_ready_due_ms ? std::max<int64_t>(0, clock_.WallMillis() - t.oldest_ready_due_ms) : 0;
  j["in_flight"] = dispatcher_ ? dispatcher_->in_flight(t.name) : 0;
  return j;
}

void Api::ListTopics(Call& c) {
  engine_.Topics([this, reply = std::move(c.reply)](Result<std::vector<engine::TopicInfo>> r) {
    if (!r.ok()) return reply(ProblemResponse(r.status()));
    json out = json::array();
    for (const auto& t : *r) out.push_back(RenderTopic(t));
    reply(JsonResponse(200, {{"topics", std::move(out)}}));
  });
}

void Api::GetTopic(Call& c) { ReplyTopic(std::move(c.reply), c.params[0]); }

void Api::ReplyTopic(Reply reply, const std::string& name) {
  engine_.Topic(name, [this, reply = std::move(reply)](Result<engine::TopicInfo> t) {
    if (!t.ok()) return reply(ProblemResponse(t.status()));
    reply(JsonResponse(200, RenderTopic(*t)));
  });
}

void Api::PutTopic(Call& c) {
  auto body = ParseBody(c.req, true);
  if (!body.ok()) return c.reply(ProblemResponse(body.status()));
  auto parsed = engine::ParseTopicSettings(*body);
  if (!parsed.ok()) return c.reply(ProblemResponse(parsed.status()));
  for (auto [url, field] :
       {std::pair{parsed->target ? &parsed->target->url : nullptr, "target.url"},
        {parsed->alert ? &parsed->alert->webhook : nullptr, "alert.webhook"}}) {
    if (url == nullptr) continue;
    if (Status s = CheckTargetUrl(options_.limits, *url, field); !s.ok()) {
      return c.reply(ProblemResponse(s));
    }
  }
  // The secret is write-only: a PUT without it keeps the one set.
  if (!body->contains("signing_secret")) {
    if (auto old = engine_.SettingsOf(c.params[0])) parsed->signing_secret = old->signing_secret;
  }
  auto settings = std::make_shared<const engine::TopicSettings>(std::move(*parsed));
  std::optional<bool> paused;
  if (body->contains("paused")) paused = (*body)["paused"].get<bool>();
  std::string name = c.params[0];
  engine_.SetTopicSettings(name, settings,
                           [this, name, paused, reply = std::move(c.reply)](const Status& s) {
                             if (!s.ok()) return reply(ProblemResponse(s));
                             auto answer = [this, name, reply](const Status& st) {
                               if (!st.ok()) return reply(ProblemResponse(st));
                               ReplyTopic(reply, name);
                             };
                             auto t = engine_.Topic(name);
                             if (paused && t.ok() && *paused != t->paused) {
                               if (*paused)
                                 return engine_.PauseTube(name, engine::kPauseForeverMs, answer);
                               return engine_.ResumeTube(name, answer);
                             }
                             answer(Status::Ok());
                           });
}

void Api::PauseTopic(Call& c, bool pause) {
  auto body = ParseBody(c.req, false);
  if (!body.ok()) return c.reply(ProblemResponse(body.status()));
  int64_t for_ms = engine::kPauseForeverMs;
  for (auto& [k, v] : body->items()) {
    if (k == "for_ms" && pause) {
      auto ms = engine::ParseMillis(v, "for_ms");
      if (!ms.ok()) return c.reply(ProblemResponse(ms.status()));
      if (*ms < 1 || *ms > engine::kPauseForeverMs) {
        return c.reply(ProblemResponse(Status::InvalidField("for_ms", "must be at least 1 ms")));
      }
      for_ms = *ms;
    } else {
      return c.reply(ProblemResponse(Status::InvalidField(k, "unknown field")));
    }
  }
  std::string name = c.params[0];
  auto answer = [this, name, reply = std::move(c.reply)](const Status& s) {
    if (!s.ok()) return reply(ProblemResponse(s));
    ReplyTopic(reply, name);
  };
  if (pause) return engine_.PauseTube(name, for_ms, std::move(answer));
  engine_.ResumeTube(name, std::move(answer));
}

void Api::Stats(Call& c) {
  // In cluster mode the job counts are the cluster's, read from the database.
  engine_.Stats([this, reply = std::move(c.reply)](Result<engine::EngineStats> r) {
    if (!r.ok()) return reply(ProblemResponse(r.status()));
    const engine::EngineStats& e = *r;
    json j = {{"version", options_.version},
              {"jobs",
               {{"ready", e.ready},
                {"delayed", e.delayed},
                {"reserved", e.reserved},
                {"buried", e.buried},
                {"total_submitted", e.total_jobs},
                {"ttr_timeouts", e.job_timeouts}}},
              {"topics", e.tubes},
              {"waiting_consumers", e.waiting},
              {"draining", e.draining},
              {"unsound_rows", engine_.unsound_rows()}};
    if (dispatcher_ != nullptr) {
      delivery::DispatcherStats d = dispatcher_->stats();
      j["delivery"] = {
          {"delivered", d.delivered},       {"failed_attempts", d.failed},
          {"dead_letters", d.dead_letters}, {"in_flight", d.in_flight},
          {"alerts_sent", d.alerts_sent},   {"alerts_suppressed", d.alerts_suppressed}};
    }
    if (server_stats_) j["server"] = server_stats_();
    reply(JsonResponse(200, j));
  });
}

}  // namespace delayd::http
