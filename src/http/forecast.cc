// GET /v1/forecast?bucket=minute|hour|day&count=N&topic=T: how many delayed
// jobs fall due in each coming bucket, the current one first. Minutes count
// from the current minute, hours and days (24 hours) from the current hour.
//
// A minute forecast reads an hour of the due index: fast at any size. One
// node counts its delayed jobs per due hour in memory, so hours and days
// answer at once. In cluster mode they are read from the database, days of
// its due index, every pending job for 30 days (2.3 s with 10M jobs on
// SQLite, bench/console): those answer from a cache kept per query,
// refreshed in the background once older than kForecastMaxAgeMs. A page
// that polls gets the last figures at once ("as_of" says when they were
// read) while the next are read aside; only a query's first request waits.
#include "common/time_format.h"
#include "http/api.h"
#include "http/api_util.h"

namespace delayd::http {

using nlohmann::json;

namespace {

struct Width {
  const char* name;
  int64_t minutes;
  int64_t default_count;
};
constexpr Width kWidths[] = {{"minute", 1, 60}, {"hour", 60, 48}, {"day", 1440, 30}};
constexpr size_t kMaxCachedForecasts = 64;

}  // namespace

void Api::Forecast(Call& c) {
  for (const auto& [name, value] : c.query) {
    if (name != "bucket" && name != "count" && name != "topic") {
      return c.reply(ProblemResponse(Status::InvalidField(name, "unknown query parameter")));
    }
  }
  const std::string bucket = QueryValue(c.query, "bucket").value_or("minute");
  const Width* w = nullptr;
  for (const Width& x : kWidths) {
    if (bucket == x.name) w = &x;
  }
  if (w == nullptr) {
    return c.reply(ProblemResponse(Status::InvalidField("bucket", "must be minute, hour or day")));
  }
  auto count = QueryInt(c.query, "count", 1, 1000, w->default_count);
  if (!count.ok()) return c.reply(ProblemResponse(count.status()));
  std::optional<std::string> topic = QueryValue(c.query, "topic");
  if (topic) {
    if (Status s = CheckTopicName(*topic); !s.ok()) return c.reply(ProblemResponse(s));
  }
  // Reads the forecast now; `done` gets it, or the problem.
  auto read = [this, w, n = static_cast<size_t>(*count),
               topic](std::function<void(Response)> done) {
    const int64_t now_ms = clock_.WallMillis();
    engine_.DueForecast(w->minutes, n, topic,
                        [done = std::move(done), w, now_ms, topic](Result<engine::Forecast> r) {
                          if (!r.ok()) return done(ProblemResponse(r.status()));
                          json j = {{"bucket", w->name},
                                    {"bucket_ms", w->minutes * store::kMillisPerMinute},
                                    {"from", FormatRfc3339Ms(r->from_ms)},
                                    {"as_of", FormatRfc3339Ms(now_ms)},
                                    {"topic", topic ? json(*topic) : json()},
                                    {"counts", r->counts}};
                          done(JsonResponse(200, j));
                        });
  };
  if (w->minutes == 1 || engine_.ForecastInMemory(w->minutes)) return read(std::move(c.reply));

  const std::string key =
      std::string(w->name) + "|" + std::to_string(*count) + "|" + topic.value_or("");
  auto it = forecasts_.find(key);
  if (it == forecasts_.end()) {
    if (forecasts_.size() >= kMaxCachedForecasts) {  // drop one not being read
      for (auto e = forecasts_.begin(); e != forecasts_.end(); ++e) {
        if (!e->second.reading) {
          forecasts_.erase(e);
          break;
        }
      }
    }
    it = forecasts_.try_emplace(key).first;
  }
  CachedForecast& f = it->second;
  const int64_t now_ms = clock_.WallMillis();
  if (f.answer) {
    c.reply(*f.answer);
    if (now_ms - f.read_ms < kForecastMaxAgeMs || f.reading) return;
  } else {
    f.waiting.push_back(std::move(c.reply));
    if (f.reading) return;
  }
  f.reading = true;
  read([this, key, now_ms](Response r) {
    auto found = forecasts_.find(key);
    if (found == forecasts_.end()) return;
    CachedForecast& cached = found->second;
    cached.reading = false;
    std::vector<Reply> waiting = std::move(cached.waiting);
    if (r.status == 200) {
      cached.answer = r;
      cached.read_ms = now_ms;
    }
    for (Reply& reply : waiting) reply(r);
  });
}

}  // namespace delayd::http
