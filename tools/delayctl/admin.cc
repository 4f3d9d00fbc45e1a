// Topics, timers, stats, cluster and health commands.
#include <iostream>

#include "commands.h"

namespace delayctl {

using nlohmann::json;

namespace {

using Rows = std::vector<std::vector<std::string>>;

// GET `path`; prints it raw (json) or through `table`.
int Get(const Globals& g, const std::string& path, std::initializer_list<const char*> fields,
        const std::function<void(const json&)>& table) {
  Ctx ctx = g.Make();
  Reply r = ctx.client.Call("GET", path);
  if (int rc = CheckShape(r, fields); rc != kOk) return rc;
  ctx.json ? PrintRaw(r) : table(r.json());
  return kOk;
}

// `method` `path` with `body` (JSON text, checked first); prints the answer
// as fields.
int Send(const Globals& g, const std::string& method, const std::string& path,
         const std::string& body) {
  if (!body.empty()) {
    if (std::string e = CheckJson(body, "the JSON given"); !e.empty()) return Usage(e);
  }
  Ctx ctx = g.Make();
  Reply r = ctx.client.Call(method, path, body);
  if (int rc = Check(r); rc != kOk) return rc;
  if (r.status == 204) return kOk;
  ctx.json ? PrintRaw(r) : PrintFields(r.json());
  return kOk;
}

// JSON from --json TEXT or --file PATH (exactly one).
std::optional<std::string> JsonArg(const std::string& text, const std::string& file, int* rc) {
  if (text.empty() == file.empty()) {
    *rc = Usage("give the settings as --json TEXT or --file PATH (one of them)");
    return std::nullopt;
  }
  if (!text.empty()) return text;
  auto read = ReadInput(file);
  if (!read) *rc = Usage("cannot read " + file);
  return read;
}

void TopicRows(const json& topics) {
  Rows rows;
  for (const json& t : topics) {
    const json& n = t["counts"];
    rows.push_back({Cell(t["name"]), Cell(n["ready"]), Cell(n["delayed"]), Cell(n["reserved"]),
                    Cell(n["buried"]), t.value("paused", false) ? "yes" : "no"});
  }
  PrintTable({"TOPIC", "READY", "DELAYED", "RESERVED", "BURIED", "PAUSED"}, rows);
}

void TimerRows(const json& timers) {
  Rows rows;
  for (const json& t : timers) {
    rows.push_back({Cell(t["id"]), Cell(t["name"]), Cell(t["topic"]), Cell(t["schedule"]),
                    Cell(t["timezone"]), t.value("active", false) ? "yes" : "no",
                    Cell(t["next_fire_at"])});
  }
  PrintTable({"ID", "NAME", "TOPIC", "SCHEDULE", "TIMEZONE", "ACTIVE", "NEXT_FIRE_AT"}, rows);
}

void FireTimes(const json& j) {
  for (const json& t : j["fire_times"]) std::cout << Cell(t) << "\n";
}

}  // namespace

void AddAdminCommands(CLI::App& app, Globals& g) {
  auto* topics = app.add_subcommand("topics", "Topics: list (default), get, set, pause, resume");
  topics->require_subcommand(0, 1);
  topics->callback([&g, topics] {
    if (topics->get_subcommands().empty()) {
      g.rc = Get(g, "/v1/topics", {"topics"}, [](const json& j) { TopicRows(j["topics"]); });
    }
  });
  {
    auto* c = topics->add_subcommand("get", "A topic's settings and counts");
    auto name = std::make_shared<std::string>();
    c->add_option("name", *name, "The topic")->required();
    c->callback([&g, name] { g.rc = Send(g, "GET", "/v1/topics/" + Escape(*name), ""); });
    auto* set = topics->add_subcommand("set", "Replace a topic's settings (PUT /v1/topics/{t})");
    auto sname = std::make_shared<std::string>(), text = std::make_shared<std::string>(),
         file = std::make_shared<std::string>();
    set->add_option("name", *sname, "The topic")->required();
    set->add_option("--json", *text, "The settings: target, retry, rate_limit_per_s, ...");
    set->add_option("--file", *file, "The settings from a file; - for stdin");
    set->callback([&g, sname, text, file] {
      int rc = kOk;
      auto body = JsonArg(*text, *file, &rc);
      g.rc = body ? Send(g, "PUT", "/v1/topics/" + Escape(*sname), *body) : rc;
    });
    auto* pause = topics->add_subcommand("pause", "Stop handing out a topic's jobs");
    auto pname = std::make_shared<std::string>(), for_ = std::make_shared<std::string>();
    pause->add_option("name", *pname, "The topic")->required();
    pause->add_option("--for", *for_, "For this long (ms or a duration); default: until resumed");
    pause->callback([&g, pname, for_] {
      json body = json::object();
      if (!for_->empty()) body["for_ms"] = Millis(*for_);
      g.rc = Send(g, "POST", "/v1/topics/" + Escape(*pname) + "/pause", body.dump());
    });
    auto* resume = topics->add_subcommand("resume", "Hand out a paused topic's jobs again");
    auto rname = std::make_shared<std::string>();
    resume->add_option("name", *rname, "The topic")->required();
    resume->callback(
        [&g, rname] { g.rc = Send(g, "POST", "/v1/topics/" + Escape(*rname) + "/resume", "{}"); });
  }

  auto* timers = app.add_subcommand(
      "timers",
      "Timers: list (default), get, create, edit, delete, pause, resume, next, preview, fires");
  timers->require_subcommand(0, 1);
  timers->callback([&g, timers] {
    if (timers->get_subcommands().empty()) {
      g.rc = Get(g, "/v1/timers?limit=1000", {"timers"},
                 [](const json& j) { TimerRows(j["timers"]); });
    }
  });
  {
    auto id_command = [&](const char* name, const char* help, auto run) {
      auto* c = timers->add_subcommand(name, help);
      auto id = std::make_shared<uint64_t>(0);
      c->add_option("id", *id, "The timer's id")->required()->check(CLI::PositiveNumber);
      c->callback([&g, id, run] { g.rc = run(g, "/v1/timers/" + std::to_string(*id)); });
      return c;
    };
    id_command("get", "A timer",
               [](Globals& gl, const std::string& at) { return Send(gl, "GET", at, ""); });
    id_command("delete", "Delete a timer (its jobs already made stay)",
               [](Globals& gl, const std::string& at) { return Send(gl, "DELETE", at, ""); });
    id_command("pause", "Stop a timer's fires", [](Globals& gl, const std::string& at) {
      return Send(gl, "POST", at + "/pause", "{}");
    });
    id_command(
        "resume", "Start a paused timer's fires again",
        [](Globals& gl, const std::string& at) { return Send(gl, "POST", at + "/resume", "{}"); });
    id_command("next", "A timer's next fire times, in UTC", [](Globals& gl, const std::string& at) {
      return Get(gl, at + "/next?count=10", {"fire_times"}, FireTimes);
    });
    id_command("fires", "A timer's past fires and their jobs",
               [](Globals& gl, const std::string& at) {
                 return Get(gl, at + "/fires", {"fires"}, [](const json& j) {
                   Rows rows;
                   for (const json& f : j["fires"]) {
                     rows.push_back({Cell(f["fire_at"]), Cell(f["outcome"]), Cell(f["job_id"]),
                                     Cell(f.value("job_state", json())),
                                     Cell(f.value("job_last_error", json()))});
                   }
                   PrintTable({"FIRE_AT", "OUTCOME", "JOB", "JOB_STATE", "LAST_ERROR"}, rows);
                 });
               });
    for (auto [name, method] : {std::pair{"create", "POST"}, {"edit", "PATCH"}}) {
      const bool create = std::string(name) == "create";
      auto* c = timers->add_subcommand(
          name, create ? "Create a timer from flags or --json (POST /v1/timers)"
                       : "Change a timer's fields from --json (PATCH /v1/timers/{id})");
      auto id = std::make_shared<uint64_t>(0);
      auto text = std::make_shared<std::string>(), file = std::make_shared<std::string>();
      auto tname = std::make_shared<std::string>(), topic = std::make_shared<std::string>();
      auto schedule = std::make_shared<std::string>(), tz = std::make_shared<std::string>();
      auto body = std::make_shared<std::string>(), target = std::make_shared<std::string>();
      if (!create)
        c->add_option("id", *id, "The timer's id")->required()->check(CLI::PositiveNumber);
      c->add_option("--json", *text, "The timer as the API takes it");
      c->add_option("--file", *file, "The timer from a file; - for stdin");
      if (create) {
        c->add_option("--name", *tname, "A unique name");
        c->add_option("--topic", *topic, "The topic its jobs go to");
        c->add_option("--schedule", *schedule, "A cron expression, a macro or @every 90s");
        c->add_option("--timezone", *tz, "An IANA time zone (default UTC)");
        c->add_option("--body", *body, "Each fire's job body: JSON");
        c->add_option("--target", *target, "Deliver each fire's job by POST to this URL");
      }
      c->callback([&g, create, method = std::string(method), id, text, file, tname, topic, schedule,
                   tz, body, target] {
        std::string request;
        if (create && text->empty() && file->empty()) {
          if (tname->empty() || topic->empty() || schedule->empty()) {
            g.rc = Usage("timers create needs --name, --topic and --schedule (or --json)");
            return;
          }
          json t = {{"name", *tname}, {"topic", *topic}, {"schedule", *schedule}};
          if (!tz->empty()) t["timezone"] = *tz;
          json tmpl = json::object();
          if (!target->empty()) tmpl["target"] = {{"url", *target}};
          request = t.dump();
          if (!body->empty()) {
            if (std::string e = CheckJson(*body, "--body"); !e.empty()) {
              g.rc = Usage(e);
              return;
            }
            std::string tt = tmpl.dump();
            tt.insert(tt.size() - 1, std::string(tmpl.empty() ? "" : ",") + "\"body\":" + *body);
            request.insert(request.size() - 1, ",\"template\":" + tt);
          } else if (!tmpl.empty()) {
            request.insert(request.size() - 1, ",\"template\":" + tmpl.dump());
          }
        } else {
          int rc = kOk;
          auto j = JsonArg(*text, *file, &rc);
          if (!j) {
            g.rc = rc;
            return;
          }
          request = *j;
        }
        g.rc =
            Send(g, method, create ? "/v1/timers" : "/v1/timers/" + std::to_string(*id), request);
      });
    }
    auto* preview = timers->add_subcommand("preview", "The next fire times of a schedule, in UTC");
    auto schedule = std::make_shared<std::string>(), tz = std::make_shared<std::string>();
    auto count = std::make_shared<int>(5);
    preview->add_option("--schedule", *schedule, "A cron expression, a macro or @every 90s")
        ->required();
    preview->add_option("--timezone", *tz, "An IANA time zone (default UTC)");
    preview->add_option("--count", *count, "How many (1-1000, default 5)")
        ->check(CLI::Range(1, 1000));
    preview->callback([&g, schedule, tz, count] {
      json req = {{"schedule", *schedule}, {"count", *count}};
      if (!tz->empty()) req["timezone"] = *tz;
      Ctx ctx = g.Make();
      Reply r = ctx.client.Call("POST", "/v1/timers/preview", req.dump());
      if ((g.rc = Check(r)) != kOk) return;
      ctx.json ? PrintRaw(r) : FireTimes(r.json());
    });
  }

  auto* stats = app.add_subcommand("stats", "The server's figures (GET /v1/stats)");
  stats->callback([&g] { g.rc = Get(g, "/v1/stats", {"jobs", "version"}, PrintFields); });
  auto* cluster = app.add_subcommand("cluster", "Cluster nodes and shard leases (GET /v1/cluster)");
  cluster->callback([&g] {
    g.rc = Get(g, "/v1/cluster", {}, [](const json& j) {
      Rows rows;
      for (const json& n : j["nodes"]) {
        rows.push_back({Cell(n["id"]), n.value("live", false) ? "yes" : "no",
                        Cell(n["shards_owned"]), Cell(n["beanstalk"]), Cell(n["http"]),
                        Cell(n["last_seen_ms"])});
      }
      PrintTable({"NODE", "LIVE", "SHARDS", "BEANSTALK", "HTTP", "LAST_SEEN_MS"}, rows);
      size_t unowned = 0;
      for (const json& s : j["shards"]) unowned += s["owner"].is_null() || !s.value("live", false);
      std::cout << j["shards"].size() << " shards, " << unowned << " without a live owner; lease "
                << Cell(j["lease_ms"]) << " ms\n";
    });
  });
  auto* health = app.add_subcommand("health", "Whether the server takes traffic (GET /readyz)");
  health->callback([&g] {
    Ctx ctx = g.Make();
    Reply r = ctx.client.Call("GET", "/readyz");
    const json answer = r.json();
    if (!r.not_delayd.empty() || (r.status == 200 && answer.value("status", "") != "ready")) {
      g.rc = CheckShape(r, {"status"});
      if (g.rc == kOk) {
        std::cerr << "delayctl: " << r.server
                  << " answered /readyz without \"status\": \"ready\": not delayd (check "
                     "--server)\n";
        g.rc = kUnavailable;
      }
    } else if (r.status == 200) {
      ctx.json ? PrintRaw(r) : void(std::cout << "ready\n");
      g.rc = kOk;
    } else if (r.status == 503) {
      json p = r.json();
      ctx.json
          ? PrintRaw(r)
          : void(std::cout << "not ready: "
                           << (p.is_object() ? Cell(p.value("detail", json())) : r.body) << "\n");
      g.rc = kIncomplete;
    } else {
      g.rc = Check(r);
    }
  });
}

}  // namespace delayctl
