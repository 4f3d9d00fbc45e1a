// The API's router: the route table, the checks every request passes
// (host, origin, content type, token and its scope), path and query
// decoding, and the dispatch to a route's handler.
#include <charconv>
#include <optional>
#include <string_view>

#include "http/access.h"
#include "http/api.h"
#include "http/api_util.h"

namespace delayd::http {

using nlohmann::json;

namespace {

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
}  // namespace

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

Scope Api::RequiredScope(const RouteSpec& route) {
  const std::string_view method = route.method, pattern = route.pattern;
  if (ReadOnlyMethod(method) || pattern == "/v1/timers/preview") return Scope::kRead;
  if ((method == "PUT" && pattern == "/v1/topics/{topic}") ||
      pattern == "/v1/topics/{topic}/pause" || pattern == "/v1/topics/{topic}/resume") {
    return Scope::kAdmin;
  }
  return Scope::kWrite;
}

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
  const Scope scope = needs_token ? ScopeOf(req, options_.access) : Scope::kAdmin;
  if (scope == Scope::kNone) {
    Response r = Problem(401, "unauthorized", "Unauthorized",
                         "this route needs the header Authorization: Bearer <api token>");
    r.headers.emplace_back("WWW-Authenticate", "Bearer");
    return reply(std::move(r));
  }
  bool path_known = false;
  for (const Route& route : Table()) {
    Params params;
    if (!Match(route.spec.pattern, req.path, &params)) continue;
    path_known = true;
    if (req.method != route.spec.method) continue;
    if (const Scope needed = RequiredScope(route.spec); scope < needed) {
      Response r = Problem(403, "insufficient-scope", "Forbidden",
                           std::string("this token's scope is ") + ScopeName(scope) + "; " +
                               req.method + " " + route.spec.pattern + " needs " +
                               ScopeName(needed) + (needed == Scope::kWrite ? " or admin" : ""));
      r.headers.emplace_back("WWW-Authenticate", "Bearer error=\"insufficient_scope\"");
      return reply(std::move(r));
    }
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

}  // namespace delayd::http
