// The bulk routes: POST /v1/bulk starts an operation (BulkOps), GET
// /v1/bulk[/{id}] reports progress, POST /v1/bulk/{id}/stop interrupts it.
#include "common/json_dump.h"
#include "common/time_format.h"
#include "engine/spec_json.h"
#include "http/api.h"
#include "http/api_util.h"
#include "http/bulk_ops.h"

namespace delayd::http {

using nlohmann::json;

namespace {

// Longest shift of a reschedule: beanstalkd's largest delay.
constexpr int64_t kMaxShiftMs = engine::kMaxDurationMs;

// A signed duration: milliseconds, or "30m" / "-2h".
Result<int64_t> ParseShift(const json& v) {
  if (v.is_string()) {
    std::string text = v.get<std::string>();
    const bool negative = !text.empty() && text.front() == '-';
    auto ms = engine::ParseMillis(negative ? json(text.substr(1)) : v, "shift");
    if (!ms.ok()) return ms.status();
    return negative ? -*ms : *ms;
  }
  if (v.is_number_integer() && !v.is_number_unsigned()) {
    const int64_t n = v.get<int64_t>();
    if (n >= -kMaxShiftMs && n <= kMaxShiftMs) return n;
  } else if (v.is_number_unsigned() && v.get<uint64_t>() <= uint64_t{kMaxShiftMs}) {
    return static_cast<int64_t>(v.get<uint64_t>());
  }
  return Status::InvalidField("shift",
                              "must be milliseconds (negative: earlier) or a duration "
                              "like \"30m\" or \"-2h\", at most 2^32-1 s either way");
}

Result<BulkRequest> ParseBulkRequest(const json& body) {
  static constexpr const char* kKnown[] = {"action", "filter", "dry_run",
                                           "shift",  "due_at", "max_jobs"};
  for (const auto& item : body.items()) {
    const std::string& k =
        item.key();  // not a structured binding: clang 14 lambdas cannot capture one
    if (std::find_if(std::begin(kKnown), std::end(kKnown), [&](const char* n) { return k == n; }) ==
        std::end(kKnown)) {
      return Status::InvalidField(k, "unknown field");
    }
  }
  BulkRequest r;
  if (!body.contains("action") || !body["action"].is_string()) {
    return Status::InvalidField("action",
                                "is required: one of cancel, retry, kick, run-now, reschedule");
  }
  auto action = ParseBulkAction(body["action"].get<std::string>());
  if (!action) {
    return Status::InvalidField("action",
                                "must be one of cancel, retry, kick, run-now, reschedule");
  }
  r.action = *action;
  // The filter: the same fields as GET /v1/jobs's query, all strings.
  if (!body.contains("filter") || !body["filter"].is_object() || body["filter"].empty()) {
    return Status::InvalidField("filter",
                                "is required: an object with at least one of topic, state, "
                                "key_prefix, due_after, due_before, error, body_field");
  }
  Query q;
  for (const auto& [k, v] : body["filter"].items()) {
    if (!v.is_string()) return Status::InvalidField("filter." + k, "must be a string");
    q.emplace_back(k, v.get<std::string>());
  }
  auto filter = ParseListFilter(q, {}, "filter.");
  if (!filter.ok()) return filter.status();
  r.filter = std::move(*filter);
  if (body.contains("dry_run")) {
    if (!body["dry_run"].is_boolean())
      return Status::InvalidField("dry_run", "must be true or false");
    r.dry_run = body["dry_run"].get<bool>();
  }
  if (body.contains("max_jobs")) {
    const json& m = body["max_jobs"];
    if (!m.is_number_unsigned() || m.get<uint64_t>() == 0) {
      return Status::InvalidField("max_jobs", "must be a positive integer");
    }
    r.max_jobs = m.get<uint64_t>();
  }
  const bool reschedule = r.action == BulkAction::kReschedule;
  if (body.contains("shift")) {
    if (!reschedule) return Status::InvalidField("shift", "is for action reschedule only");
    auto shift = ParseShift(body["shift"]);
    if (!shift.ok()) return shift.status();
    r.shift_ms = *shift;
  }
  if (body.contains("due_at")) {
    if (!reschedule) return Status::InvalidField("due_at", "is for action reschedule only");
    auto at =
        body["due_at"].is_string() ? ParseRfc3339(body["due_at"].get<std::string>()) : std::nullopt;
    if (!at || *at < 0) return Status::InvalidField("due_at", "must be an RFC 3339 date-time");
    r.due_at_ms = *at;
  }
  if (reschedule && r.shift_ms.has_value() == r.due_at_ms.has_value()) {
    return Status::InvalidField("shift", "reschedule needs exactly one of shift and due_at");
  }
  return r;
}

json FilterJson(const engine::ListFilter& f) {
  json j = json::object();
  if (f.topic) j["topic"] = *f.topic;
  if (f.state) j["state"] = std::string(engine::StateName(*f.state));
  if (!f.key_prefix.empty()) j["key_prefix"] = f.key_prefix;
  if (f.due_after_ms) j["due_after"] = FormatRfc3339Ms(*f.due_after_ms);
  if (f.due_before_ms) j["due_before"] = FormatRfc3339Ms(*f.due_before_ms);
  if (!f.error_contains.empty()) j["error"] = f.error_contains;
  if (f.body) {
    std::string path;
    for (const std::string& segment : f.body->path) path += (path.empty() ? "" : ".") + segment;
    j["body_field"] = path;
    if (f.body->value) j["body_value"] = *f.body->value;
  }
  return j;
}

json ProgressJson(const BulkProgress& p) {
  const BulkRequest& r = p.request;
  json j = {{"id", p.id},
            {"action", std::string(BulkActionName(r.action))},
            {"filter", FilterJson(r.filter)},
            {"dry_run", r.dry_run},
            {"state", std::string(BulkStateName(p.state))},
            {"stop_asked", p.stop_asked},
            {"matched", p.matched},
            {"applied", p.applied},
            {"skipped", p.skipped},
            {"chunks", p.chunks},
            {"started_at", FormatRfc3339Ms(p.started_ms)},
            {"finished_at", p.finished_ms > 0 ? json(FormatRfc3339Ms(p.finished_ms)) : json()},
            {"error", p.error.empty() ? json() : json(p.error)}};
  if (r.max_jobs > 0) j["max_jobs"] = r.max_jobs;
  if (r.shift_ms) j["shift_ms"] = *r.shift_ms;
  if (r.due_at_ms) j["due_at"] = FormatRfc3339Ms(*r.due_at_ms);
  return j;
}

}  // namespace

// GET /v1/dead-letters?topic=T&limit=N: the dead letters grouped by their
// last error, largest first, each group with its count and first job; what
// the console's dead-letter page shows and retries by (a bulk retry with
// the group's error as filter).
void Api::DeadLetterGroups(Call& c) {
  for (const auto& [name, value] : c.query) {
    if (name != "topic" && name != "limit") {
      return c.reply(ProblemResponse(Status::InvalidField(name, "unknown query parameter")));
    }
  }
  auto limit = QueryInt(c.query, "limit", 1, 1000, 100);
  if (!limit.ok()) return c.reply(ProblemResponse(limit.status()));
  std::optional<std::string> topic = QueryValue(c.query, "topic");
  if (topic) {
    if (Status s = CheckTopicName(*topic); !s.ok()) return c.reply(ProblemResponse(s));
  }
  engine_.DeadLetterGroups(
      topic, static_cast<size_t>(*limit),
      [reply = std::move(c.reply)](Result<std::vector<store::ErrorGroup>> r) {
        if (!r.ok()) return reply(ProblemResponse(r.status()));
        json groups = json::array();
        uint64_t total = 0;
        for (const store::ErrorGroup& g : *r) {
          groups.push_back({{"error", g.error.empty() ? json() : json(g.error)},
                            {"count", g.count},
                            {"first_job_id", g.first_id}});
          total += g.count;
        }
        reply(JsonResponse(200, {{"groups", std::move(groups)}, {"jobs", total}}));
      });
}

void Api::StartBulk(Call& c) {
  auto body = ParseBody(c.req, true);
  if (!body.ok()) return c.reply(ProblemResponse(body.status()));
  auto request = ParseBulkRequest(*body);
  if (!request.ok()) return c.reply(ProblemResponse(request.status()));
  auto id = bulk_->Start(std::move(*request));
  if (!id.ok()) return c.reply(ProblemResponse(id.status()));
  Response r = JsonResponse(202, ProgressJson(*bulk_->Find(*id)));
  r.headers.emplace_back("Location", "/v1/bulk/" + std::to_string(*id));
  c.reply(std::move(r));
}

void Api::ListBulk(Call& c) {
  json out = json::array();
  for (const BulkProgress* p : bulk_->Recent()) out.push_back(ProgressJson(*p));
  c.reply(JsonResponse(200, {{"operations", std::move(out)}}));
}

void Api::GetBulk(Call& c) {
  auto id = ParseId(c.params[0], "bulk operation");
  if (!id.ok()) return c.reply(ProblemResponse(id.status()));
  const BulkProgress* p = bulk_->Find(*id);
  if (p == nullptr) {
    return c.reply(ProblemResponse(Status::NotFound("no bulk operation " + c.params[0])));
  }
  c.reply(JsonResponse(200, ProgressJson(*p)));
}

void Api::StopBulk(Call& c) {
  auto id = ParseId(c.params[0], "bulk operation");
  if (!id.ok()) return c.reply(ProblemResponse(id.status()));
  if (Status s = bulk_->Stop(*id); !s.ok()) return c.reply(ProblemResponse(s));
  c.reply(JsonResponse(200, ProgressJson(*bulk_->Find(*id))));
}

}  // namespace delayd::http
