// Job commands: submit, get, attempts, list, cancel, retry, run-now, kick, bury,
// and bulk operations (which follow their progress until they end).
#include <charconv>
#include <csignal>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "commands.h"

namespace delayctl {

using nlohmann::json;

std::string CheckJson(const std::string& text, const std::string& what) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) return what + " is not valid JSON";
  return "";
}

json Millis(const std::string& text) {
  int64_t ms = 0;
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, ms);
  return !text.empty() && ec == std::errc() && p == end ? json(ms) : json(text);
}

std::optional<std::string> ReadInput(const std::string& path) {
  std::stringstream ss;
  if (path == "-") {
    ss << std::cin.rdbuf();
  } else {
    std::ifstream in(path, std::ios::binary);
    if (!in) return std::nullopt;
    ss << in.rdbuf();
  }
  return ss.str();
}

namespace {

// Filter options shared by list and bulk.
struct Filter {
  std::string topic, state, key_prefix, due_after, due_before, error, body_field, body_value;
  void Add(CLI::App* c) {
    c->add_option("--topic", topic, "Only jobs of this topic");
    c->add_option("--state", state, "delayed, ready, reserved, buried or done")
        ->check(CLI::IsMember({"delayed", "ready", "reserved", "buried", "done"}));
    c->add_option("--key-prefix", key_prefix, "Only jobs whose key starts with this");
    c->add_option("--due-after", due_after, "Due at or after this RFC 3339 time");
    c->add_option("--due-before", due_before, "Due before this RFC 3339 time");
    c->add_option("--error", error, "Only jobs whose last error contains this text");
    c->add_option("--body-field", body_field,
                  "Only jobs whose JSON body has this field (customer.id, items.0.sku)");
    c->add_option("--body-value", body_value,
                  "With --body-field: the field's value (a string's text, or a number, true, "
                  "false or null as written)");
  }
  std::vector<std::pair<std::string, std::string>> Fields() const {
    std::vector<std::pair<std::string, std::string>> out;
    for (auto [k, v] : {std::pair{"topic", &topic},
                        {"state", &state},
                        {"key_prefix", &key_prefix},
                        {"due_after", &due_after},
                        {"due_before", &due_before},
                        {"error", &error},
                        {"body_field", &body_field},
                        {"body_value", &body_value}}) {
      if (!v->empty()) out.emplace_back(k, *v);
    }
    return out;
  }
};

// KIND: what delivers the job (http, grpc, kafka, amqp), or pull.
std::vector<std::string> JobRow(const json& j) {
  const json kind = j.value("target_kind", json());
  return {Cell(j["id"]),
          Cell(j["topic"]),
          Cell(j["state"]),
          kind.is_string() ? kind.get<std::string>() : "pull",
          Cell(j["due_at"]),
          Cell(j.value("key", json())),
          Cell(j.value("last_error", json()))};
}
const std::vector<std::string> kJobHeaders = {"ID",     "TOPIC", "STATE",     "KIND",
                                              "DUE_AT", "KEY",   "LAST_ERROR"};

int Submit(const Globals& g, const std::string& topic, const std::string& body,
           const std::string& key, const std::string& delay, const std::string& at,
           int64_t priority, const std::string& target, const std::string& file, size_t batch) {
  Ctx ctx = g.Make();
  const std::string path = "/v1/topics/" + Escape(topic) + "/jobs";
  std::vector<std::string> jobs;  // JSON texts, sent as written
  if (!file.empty()) {
    if (!body.empty() || !key.empty() || !delay.empty() || !at.empty() || !target.empty()) {
      return Usage(
          "--file takes the jobs from the file; give no --body, --key, --delay, --at or "
          "--target with it");
    }
    auto text = ReadInput(file);
    if (!text) return Usage("cannot read " + file);
    std::istringstream lines(*text);
    std::string line;
    for (int n = 1; std::getline(lines, line); ++n) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      json j = json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_object()) {
        return Usage(file + ":" + std::to_string(n) +
                     ": not a JSON object (one job per line, as POST /v1/topics/{t}/jobs takes); "
                     "nothing was submitted");
      }
      jobs.push_back(line);
    }
    if (jobs.empty()) return Usage(file + " has no jobs");
  } else {
    json j = json::object();
    if (!key.empty()) j["key"] = key;
    if (!delay.empty()) j["delay"] = Millis(delay);
    if (!at.empty()) j["run_at"] = at;
    if (priority >= 0) j["priority"] = priority;
    if (!target.empty()) j["target"] = {{"url", target}};
    std::string text = j.dump();
    if (!body.empty()) {
      if (std::string e = CheckJson(body, "--body"); !e.empty()) return Usage(e);
      // The body goes in as written, byte for byte.
      text.insert(text.size() - 1, std::string(j.empty() ? "" : ",") + "\"body\":" + body);
    }
    jobs.push_back(text);
  }
  std::vector<std::vector<std::string>> rows;
  for (size_t i = 0; i < jobs.size(); i += batch) {
    std::string request = "[";
    for (size_t k = i; k < std::min(jobs.size(), i + batch); ++k) {
      if (k > i) request += ",";
      request += jobs[k];
    }
    request += "]";
    Reply r = ctx.client.Call("POST", path, request);
    if (int rc = Check(r); rc != kOk) {
      if (i > 0) std::cerr << "delayctl: the first " << i << " jobs were submitted\n";
      return rc;
    }
    if (ctx.json) {
      PrintRaw(r);
      continue;
    }
    for (const json& s : r.json()) {
      rows.push_back({Cell(s["id"]), Cell(s.value("key", json())), Cell(s["state"]),
                      s.value("duplicate", false) ? "yes" : "no", Cell(s["due_at"])});
    }
  }
  if (!ctx.json) PrintTable({"ID", "KEY", "STATE", "DUPLICATE", "DUE_AT"}, rows);
  return kOk;
}

int Show(const Globals& g, const std::string& path) {
  Ctx ctx = g.Make();
  Reply r = ctx.client.Call("GET", path);
  if (int rc = CheckShape(r, {"id"}); rc != kOk) return rc;
  ctx.json ? PrintRaw(r) : PrintFields(r.json());
  return kOk;
}

int Attempts(const Globals& g, uint64_t id) {
  Ctx ctx = g.Make();
  Reply r = ctx.client.Call("GET", "/v1/jobs/" + std::to_string(id) + "/attempts");
  if (int rc = Check(r); rc != kOk) return rc;
  if (ctx.json) return PrintRaw(r), kOk;
  std::vector<std::vector<std::string>> rows;
  const json reply = r.json();
  for (const json& a : reply["attempts"]) {
    rows.push_back({Cell(a["attempt"]), Cell(a["started_at"]), Cell(a["duration_ms"]),
                    Cell(a["outcome"]), Cell(a["http_status"]), Cell(a["error"])});
  }
  PrintTable({"ATTEMPT", "STARTED_AT", "MS", "OUTCOME", "HTTP", "ERROR"}, rows);
  return kOk;
}

int List(const Globals& g, const Filter& f, int64_t limit, bool all) {
  Ctx ctx = g.Make();
  std::string query = "?limit=" + std::to_string(limit);
  for (const auto& [k, v] : f.Fields()) query += "&" + k + "=" + Escape(v);
  std::vector<std::vector<std::string>> rows;
  std::string cursor;
  do {
    Reply r =
        ctx.client.Call("GET", "/v1/jobs" + query + (cursor.empty() ? "" : "&cursor=" + cursor));
    if (int rc = Check(r); rc != kOk) return rc;
    json page = r.json();
    if (ctx.json) PrintRaw(r);  // a page per line
    for (const json& j : page["jobs"]) rows.push_back(JobRow(j));
    cursor = page["next_cursor"].is_string() ? page["next_cursor"].get<std::string>() : "";
  } while (all && !cursor.empty());
  if (!ctx.json) {
    PrintTable(kJobHeaders, rows);
    if (!cursor.empty()) std::cerr << "more: --all, or the API's cursor " << cursor << "\n";
  }
  return kOk;
}

// One action on each id; the exit code is the first failure's.
int EachJob(const Globals& g, const std::vector<uint64_t>& ids, const std::string& method,
            const std::string& action, const std::string& done_word) {
  Ctx ctx = g.Make();
  int rc = kOk;
  for (uint64_t id : ids) {
    const std::string path =
        "/v1/jobs/" + std::to_string(id) + (action.empty() ? "" : "/" + action);
    Reply r = ctx.client.Call(method, path, method == "POST" ? "{}" : "");
    int one = Check(r);
    if (one != kOk) {
      std::cerr << "delayctl: job " << id << " was not " << done_word << "\n";
      if (rc == kOk) rc = one;
      continue;
    }
    if (ctx.json) {
      if (!r.body.empty()) PrintRaw(r);
    } else {
      std::cout << id << ": " << done_word << "\n";
    }
  }
  return rc;
}

volatile std::sig_atomic_t interrupted = 0;

int Bulk(const Globals& g, const std::string& action, const Filter& f, bool dry_run,
         const std::string& shift, const std::string& due_at, uint64_t max_jobs, bool wait) {
  Ctx ctx = g.Make();
  json filter = json::object();
  for (const auto& [k, v] : f.Fields()) filter[k] = v;
  if (filter.empty()) {
    return Usage(
        "bulk needs a filter: --topic, --state, --key-prefix, --due-after, --due-before, "
        "--error or --body-field");
  }
  json req = {{"action", action}, {"filter", filter}};
  if (dry_run) req["dry_run"] = true;
  if (!shift.empty()) req["shift"] = Millis(shift);
  if (!due_at.empty()) req["due_at"] = due_at;
  if (max_jobs > 0) req["max_jobs"] = max_jobs;
  Reply r = ctx.client.Call("POST", "/v1/bulk", req.dump());
  if (int rc = Check(r); rc != kOk) return rc;
  json op = r.json();
  const std::string at = "/v1/bulk/" + Cell(op["id"]);
  // Ctrl-C stops the operation between chunks rather than leaving it running.
  std::signal(SIGINT, [](int) { interrupted = 1; });
  bool stop_sent = false;
  while (wait && op["state"] == "running") {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if (interrupted && !stop_sent) {
      Check(ctx.client.Call("POST", at + "/stop", "{}"));
      stop_sent = true;
    }
    r = ctx.client.Call("GET", at);
    if (int rc = Check(r); rc != kOk) return rc;
    op = r.json();
    std::cerr << "bulk " << Cell(op["id"]) << ": " << Cell(op["state"]) << ", "
              << Cell(op["matched"]) << " matched, " << Cell(op["applied"]) << " applied, "
              << Cell(op["skipped"]) << " skipped\n";
  }
  ctx.json ? PrintRaw(r) : PrintFields(op);
  const std::string state = op["state"];
  return state == "done" || state == "running" ? kOk : kIncomplete;
}

}  // namespace

void AddJobCommands(CLI::App& app, Globals& g) {
  {
    auto* c =
        app.add_subcommand("submit", "Submit jobs to a topic, from flags or a file of JSON lines");
    auto topic = std::make_shared<std::string>();
    auto body = std::make_shared<std::string>(), key = std::make_shared<std::string>();
    auto delay = std::make_shared<std::string>(), at = std::make_shared<std::string>();
    auto target = std::make_shared<std::string>(), file = std::make_shared<std::string>();
    auto priority = std::make_shared<int64_t>(-1);
    auto batch = std::make_shared<size_t>(500);
    c->add_option("topic", *topic, "The topic")->required();
    c->add_option("--body", *body, "The job's body: JSON, kept byte for byte");
    c->add_option("--key", *key, "A business key, unique per topic among live jobs");
    c->add_option("--delay", *delay, "Run after this long: ms or a duration (30m, 1h30m)");
    c->add_option("--at", *at, "Run at this RFC 3339 time");
    c->add_option("--priority", *priority, "0 (most urgent) to 4294967295")
        ->check(CLI::Range(0LL, 4294967295LL));
    c->add_option("--target", *target, "Deliver by POST to this URL (a push job)");
    c->add_option("--file", *file,
                  "Jobs as JSON lines, one object per line as the API takes them; - for stdin");
    c->add_option("--batch", *batch, "Jobs per request with --file (default 500)")
        ->check(CLI::Range(1, 100000));
    c->callback([&g, topic, body, key, delay, at, priority, target, file, batch] {
      g.rc = Submit(g, *topic, *body, *key, *delay, *at, *priority, *target, *file, *batch);
    });
  }
  {
    auto* c = app.add_subcommand("get", "Show a job: by id, or by --topic and --key");
    auto id = std::make_shared<uint64_t>(0);
    auto topic = std::make_shared<std::string>(), key = std::make_shared<std::string>();
    c->add_option("id", *id, "The job's id");
    c->add_option("--topic", *topic, "With --key: the topic");
    c->add_option("--key", *key, "With --topic: the job's key");
    c->callback([&g, id, topic, key] {
      if (*id > 0 && topic->empty() && key->empty()) {
        g.rc = Show(g, "/v1/jobs/" + std::to_string(*id));
      } else if (*id == 0 && !topic->empty() && !key->empty()) {
        g.rc = Show(g, "/v1/topics/" + Escape(*topic) + "/keys/" + Escape(*key));
      } else {
        g.rc = Usage("get takes a job id, or --topic and --key");
      }
    });
  }
  {
    auto* c = app.add_subcommand("attempts", "Show a job's delivery attempts");
    auto id = std::make_shared<uint64_t>(0);
    c->add_option("id", *id, "The job's id")->required()->check(CLI::PositiveNumber);
    c->callback([&g, id] { g.rc = Attempts(g, *id); });
  }
  {
    auto* c = app.add_subcommand("list", "List jobs in id order, filtered");
    auto f = std::make_shared<Filter>();
    auto limit = std::make_shared<int64_t>(100);
    auto all = std::make_shared<bool>(false);
    f->Add(c);
    c->add_option("--limit", *limit, "Jobs per page (1-1000, default 100)")
        ->check(CLI::Range(1, 1000));
    c->add_flag("--all", *all, "Follow the cursor to the last page");
    c->callback([&g, f, limit, all] { g.rc = List(g, *f, *limit, *all); });
  }
  struct One {
    const char* name;
    const char* help;
    const char* method;
    const char* action;
    const char* done;
  };
  static constexpr One kOne[] = {
      {"cancel", "Delete jobs that are not reserved (a done job's record too)", "DELETE", "",
       "cancelled"},
      {"retry", "Retry dead letters (buried jobs) with a fresh attempt budget", "POST", "retry",
       "retried"},
      {"run-now", "Make delayed jobs ready now", "POST", "run-now", "made ready"},
      {"kick", "Make buried or delayed jobs ready", "POST", "kick", "kicked"},
      {"bury", "Park ready or delayed jobs as buried (kick or retry bring them back)", "POST",
       "bury", "buried"},
  };
  for (const One& one : kOne) {
    auto* c = app.add_subcommand(one.name, one.help);
    auto ids = std::make_shared<std::vector<uint64_t>>();
    c->add_option("ids", *ids, "Job ids")->required()->check(CLI::PositiveNumber);
    c->callback([&g, ids, one] { g.rc = EachJob(g, *ids, one.method, one.action, one.done); });
  }
  {
    auto* bulk =
        app.add_subcommand("bulk", "Act on every job a filter matches; follow its progress");
    bulk->require_subcommand(1);
    for (const char* action : {"cancel", "retry", "kick", "run-now", "reschedule"}) {
      auto* c =
          bulk->add_subcommand(action, std::string("Bulk ") + action + " of the matching jobs");
      auto f = std::make_shared<Filter>();
      auto dry = std::make_shared<bool>(false), no_wait = std::make_shared<bool>(false);
      auto shift = std::make_shared<std::string>(), due_at = std::make_shared<std::string>();
      auto max_jobs = std::make_shared<uint64_t>(0);
      f->Add(c);
      c->add_flag("--dry-run", *dry, "Only count the matching jobs");
      c->add_option("--max-jobs", *max_jobs, "Stop after this many matches");
      c->add_flag("--no-wait", *no_wait, "Print the operation and return at once");
      if (std::string(action) == "reschedule") {
        c->add_option("--shift", *shift,
                      "Move each due time by this: ms or a duration, - for earlier");
        c->add_option("--due-at", *due_at, "Set each due time to this RFC 3339 time");
      }
      c->callback([&g, action, f, dry, no_wait, shift, due_at, max_jobs] {
        g.rc = Bulk(g, action, *f, *dry, *shift, *due_at, *max_jobs, !*no_wait);
      });
    }
    auto* status = bulk->add_subcommand("status", "Show a bulk operation's progress");
    auto id = std::make_shared<uint64_t>(0);
    status->add_option("id", *id, "The operation's id")->required();
    status->callback([&g, id] { g.rc = Show(g, "/v1/bulk/" + std::to_string(*id)); });
    auto* stop = bulk->add_subcommand("stop", "Stop a bulk operation after the chunk in flight");
    auto sid = std::make_shared<uint64_t>(0);
    stop->add_option("id", *sid, "The operation's id")->required();
    stop->callback([&g, sid] {
      Ctx ctx = g.Make();
      Reply r = ctx.client.Call("POST", "/v1/bulk/" + std::to_string(*sid) + "/stop", "{}");
      g.rc = Check(r);
      if (g.rc == kOk) ctx.json ? PrintRaw(r) : PrintFields(r.json());
    });
    auto* list = bulk->add_subcommand("list", "The recent bulk operations");
    list->callback([&g] {
      Ctx ctx = g.Make();
      Reply r = ctx.client.Call("GET", "/v1/bulk");
      if ((g.rc = Check(r)) != kOk) return;
      if (ctx.json) return PrintRaw(r);
      std::vector<std::vector<std::string>> rows;
      const json reply = r.json();
      for (const json& o : reply["operations"]) {
        rows.push_back({Cell(o["id"]), Cell(o["action"]), Cell(o["state"]), Cell(o["matched"]),
                        Cell(o["applied"]), Cell(o["skipped"]), o["filter"].dump()});
      }
      PrintTable({"ID", "ACTION", "STATE", "MATCHED", "APPLIED", "SKIPPED", "FILTER"}, rows);
    });
  }
}

}  // namespace delayctl
