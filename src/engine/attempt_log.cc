#include "engine/attempt_log.h"

#include <array>
#include <nlohmann/json.hpp>

#include "common/json_text.h"
#include "common/json_writer.h"

namespace delayd::engine {

namespace {
constexpr std::array<std::string_view, 3> kOutcomes = {"ok", "retry", "dead"};

constexpr const char* kNumber = "attempt";
constexpr const char* kStarted = "started_ms";
constexpr const char* kDuration = "duration_ms";
constexpr const char* kOutcome = "outcome";
constexpr const char* kHttpStatus = "http_status";
constexpr const char* kError = "error";
constexpr const char* kParentId = "parent_id";  // written when there is one
}  // namespace

std::string_view OutcomeName(AttemptOutcome o) { return kOutcomes[static_cast<size_t>(o)]; }

std::optional<AttemptOutcome> ParseOutcome(std::string_view name) {
  for (size_t i = 0; i < kOutcomes.size(); ++i) {
    if (kOutcomes[i] == name) return static_cast<AttemptOutcome>(i);
  }
  return std::nullopt;
}

void AppendAttempt(std::string& log, const Attempt& a, size_t keep) {
  std::string entry;
  JsonWriter w(entry);
  w.BeginObject();
  w.Key(kNumber).Uint(a.number);
  w.Key(kStarted).Int(a.started_ms);
  w.Key(kDuration).Int(a.duration_ms);
  w.Key(kOutcome).String(OutcomeName(a.outcome));
  w.Key(kHttpStatus).Int(a.http_status);
  w.Key(kError).String(a.error);
  if (!a.parent_id.empty()) w.Key(kParentId).String(a.parent_id);
  w.EndObject();
  // Appending is text work: one delivery used to parse and re-render the
  // whole log. Only a log that may have outgrown its limit (one entry per
  // reservation) is split, to drop its oldest entries.
  if (log.size() < 2 || log.front() != '[' || log.back() != ']') {
    log = "[" + entry + "]";
  } else {
    log.pop_back();
    if (log.size() > 1) log += ',';
    log += entry;
    log += ']';
  }
  if (a.number <= keep) return;
  const std::vector<std::string_view> all = JsonElementTexts(log);
  if (all.size() <= keep) return;
  std::string kept = "[";
  for (size_t i = all.size() - keep; i < all.size(); ++i) {
    if (kept.size() > 1) kept += ',';
    kept += all[i];
  }
  kept += ']';
  log = std::move(kept);
}

std::vector<Attempt> ReadAttempts(std::string_view log) {
  std::vector<Attempt> out;
  if (log.empty()) return out;
  Result<nlohmann::json> parsed = ParseJson(log, "attempt_log");
  if (!parsed.ok() || !parsed->is_array()) return out;
  for (const nlohmann::json& e : *parsed) {
    if (!e.is_object()) continue;
    Attempt a;
    a.number = e.value(kNumber, 0u);
    a.started_ms = e.value(kStarted, int64_t{0});
    a.duration_ms = e.value(kDuration, int64_t{0});
    a.outcome = ParseOutcome(e.value(kOutcome, "")).value_or(AttemptOutcome::kRetry);
    a.http_status = e.value(kHttpStatus, 0);
    a.error = e.value(kError, "");
    a.parent_id = e.value(kParentId, "");
    out.push_back(std::move(a));
  }
  return out;
}

}  // namespace delayd::engine
