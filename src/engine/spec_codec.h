// The stored form of a job's spec and of a topic's settings: what the
// store keeps in `jobs.spec` and `tubes.settings` (doc/store.md, "Stored
// specs and settings"), and the JSON the API shows of a target and a retry
// policy.
//
// Decoding is lenient and never applies the API's rules (spec_json.h):
// what was stored is read back as it was written, by this version or any
// other. A rule tightened since cannot make a stored push job a pull job
// (its stored `push` column, which claims go by, says push) or drop a
// topic's settings. Unknown members are skipped (a newer version's); a
// member of the wrong type keeps its default and is logged; a target is
// kept whatever its members hold, and the dispatcher refuses what it cannot
// send as a failed attempt, visibly.
#pragma once

#include <memory>
#include <string>

#include "common/json_writer.h"
#include "common/recent_cache.h"
#include "engine/spec.h"

namespace delayd::engine {

// "" for a plain job (no target, no retry policy, raw body).
std::string EncodeSpec(const JobSpec& spec);
// nullptr for "". Text that is not JSON decodes to a plain spec (logged).
std::shared_ptr<const JobSpec> DecodeSpec(const std::string& text);

// DecodeSpec that keeps the last few specs it decoded and hands out the one
// it has for the same text: the jobs a burst reads back from the store
// (a window's refill, the horizon's loads) mostly share their topic's spec,
// which is then parsed once rather than once a job (it was a third of the
// event loop's time in a burst of push jobs: bench/README.md, "Kafka at
// 100k jobs/s"). Bounded by kEntries texts. Not thread-safe: one per engine.
class SpecCache {
 public:
  std::shared_ptr<const JobSpec> Decode(const std::string& text);

  static constexpr size_t kEntries = 16;

 private:
  RecentCache<std::shared_ptr<const JobSpec>, kEntries> specs_;
};

std::string EncodeSettings(const TopicSettings& s);
// nullptr for "" and for text that is not a JSON object (logged).
std::shared_ptr<const TopicSettings> DecodeSettings(const std::string& text);

// The members of a target and of a retry policy, each written in full: the
// stored form, and what the API shows.
JsonWriter& WriteJson(JsonWriter& w, const Target& t);
JsonWriter& WriteJson(JsonWriter& w, const RetryPolicy& r);

}  // namespace delayd::engine
