// The Api's construction, the console's files and readiness (api.h says
// where the other routes are).
#include "http/api.h"

#include "common/json_dump.h"
#include "http/access.h"
#include "http/bulk_ops.h"
#include "http/console.h"

namespace delayd::http {

using nlohmann::json;

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
    // What the page's token may do (before it has one: whether it needs
    // one), so that the console offers only that; read-only for everyone
    // on a --console read-only server.
    const Scope scope = ScopeOf(c.req, options_.access);
    const bool read_only = options_.console == ConsoleMode::kReadOnly || scope == Scope::kRead;
    r.body = DumpJson({{"mode", read_only ? "read-only" : "full"},
                       {"scope", read_only && scope != Scope::kNone ? "read" : ScopeName(scope)},
                       {"version", options_.version}});
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

}  // namespace delayd::http
