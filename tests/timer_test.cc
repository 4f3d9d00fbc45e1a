// Recurring timers through the real binary and its HTTP API: a per-second
// timer across kill -9 (no gap, no duplicate), a pause under each misfire
// policy, preview against what fires, and every validation error.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "common/time_format.h"
#include "support/http.h"
#include "support/process.h"

namespace delayd::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

class TimerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A fire more than 1.5 s late counts as missed, so pauses stay short.
    server_ = std::make_unique<DelaydServer>(
        MakeTempDir("delayd-timer"), std::vector<std::string>{"--timer-misfire-grace-ms", "1500"});
  }
  HttpReply Call(const std::string& method, const std::string& target, const json& body = nullptr) {
    return HttpCall(server_->http_port(), method, target, body.is_null() ? "" : body.dump());
  }
  json Ok(const std::string& method, const std::string& target, const json& body = nullptr,
          int want = 200) {
    HttpReply r = Call(method, target, body);
    EXPECT_EQ(r.status, want) << method << " " << target << ": " << r.body;
    return r.json();
  }
  // The fire times (ms) of the jobs timer `id` created, from their keys, sorted.
  std::vector<int64_t> Fired(uint64_t id) {
    const std::string prefix = "timer:" + std::to_string(id) + ":";
    json page = Ok("GET", "/v1/jobs?limit=1000&key_prefix=" + prefix);
    std::vector<int64_t> out;
    for (const json& j : page["jobs"]) {
      out.push_back(std::stoll(j["key"].get<std::string>().substr(prefix.size())));
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  uint64_t CreateEverySecond(const std::string& name, const std::string& misfire = "skip") {
    json t = Ok("POST", "/v1/timers",
                {{"name", name},
                 {"topic", "ticks"},
                 {"schedule", "* * * * * *"},
                 {"misfire", misfire},
                 {"misfire_limit", 2},
                 {"template", {{"body", {{"from", name}}}}}},
                201);
    return t["id"].get<uint64_t>();
  }
  std::unique_ptr<DelaydServer> server_;
};

TEST_F(TimerTest, APerSecondTimerHasNoGapAndNoDuplicateAcrossKill9) {
  const uint64_t id = CreateEverySecond("every-second");
  for (int round = 0; round < 2; ++round) {
    const size_t before = Fired(id).size();
    ASSERT_TRUE(WaitUntil([&] { return Fired(id).size() >= before + 3; }, 10s));
    server_->Kill9();
    server_->Restart();
  }
  ASSERT_TRUE(WaitUntil([&] { return Fired(id).size() >= 9; }, 10s));
  std::vector<int64_t> fired = Fired(id);
  std::set<int64_t> unique(fired.begin(), fired.end());
  EXPECT_EQ(unique.size(), fired.size()) << "a fire time created twice";
  for (size_t i = 1; i < fired.size(); ++i) {
    EXPECT_EQ(fired[i] - fired[i - 1], 1000) << "gap after " << FormatRfc3339Ms(fired[i - 1]);
  }
  // Each job is due at its fire time and carries the template.
  json job = Ok(
      "GET", "/v1/topics/ticks/keys/timer:" + std::to_string(id) + ":" + std::to_string(fired[2]));
  EXPECT_EQ(ParseRfc3339(job["due_at"].get<std::string>()), fired[2]);
  EXPECT_EQ(job["body"], json({{"from", "every-second"}}));
}

TEST_F(TimerTest, PauseThenResumeUnderEachMisfirePolicy) {
  for (const std::string policy : {"skip", "fire_once", "fire_all"}) {
    const uint64_t id = CreateEverySecond("m-" + policy, policy);
    ASSERT_TRUE(WaitUntil([&] { return !Fired(id).empty(); }, 5s));
    json paused = Ok("POST", "/v1/timers/" + std::to_string(id) + "/pause");
    EXPECT_EQ(paused["active"], false);
    EXPECT_TRUE(paused["next_fire_at"].is_null());
    const int64_t last = Fired(id).back();
    // Wait out four fire times plus the grace, then resume.
    const int64_t resume_at = last + 5500;
    ASSERT_TRUE(WaitUntil(
        [&] {
          return std::chrono::duration_cast<std::chrono::milliseconds>(
                     std::chrono::system_clock::now().time_since_epoch())
                     .count() >= resume_at;
        },
        10s));
    EXPECT_EQ(Fired(id).back(), last) << policy << ": fired while paused";
    const int64_t resumed_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count();
    Ok("POST", "/v1/timers/" + std::to_string(id) + "/resume");
    ASSERT_TRUE(WaitUntil(
        [&] {
          std::vector<int64_t> f = Fired(id);
          return !f.empty() && f.back() > resumed_ms + 1000;
        },
        10s));
    // Fires of the paused stretch that are past the grace: none with skip,
    // one with fire_once, misfire_limit (2) with fire_all.
    size_t missed = 0;
    for (int64_t f : Fired(id)) missed += f > last && f < resumed_ms - 1500;
    const size_t want = policy == "skip" ? 0 : policy == "fire_once" ? 1 : 2;
    EXPECT_EQ(missed, want) << policy;
    json fires = Ok("GET", "/v1/timers/" + std::to_string(id) + "/fires?limit=100");
    bool skip_recorded = false;
    for (const json& f : fires["fires"]) skip_recorded |= f["outcome"] == "skipped-misfire";
    EXPECT_EQ(skip_recorded, policy == "skip") << fires.dump();
    Ok("DELETE", "/v1/timers/" + std::to_string(id), nullptr, 204);
  }
}

TEST_F(TimerTest, OverlapSkipHoldsFiresWhileThePreviousJobWaits) {
  json t = Ok(
      "POST", "/v1/timers",
      {{"name", "solo"}, {"topic", "solo"}, {"schedule", "* * * * * *"}, {"overlap", "skip"}}, 201);
  const uint64_t timer_id = t["id"].get<uint64_t>();
  const std::string id = std::to_string(timer_id);
  ASSERT_TRUE(WaitUntil([&] { return Fired(timer_id).size() == 1; }, 5s));
  const int64_t first = Fired(timer_id).front();
  // Nobody takes the job: the next fires are skipped, and say so.
  ASSERT_TRUE(WaitUntil(
      [&] {
        json fires = Ok("GET", "/v1/timers/" + id + "/fires");
        int skipped = 0;
        for (const json& f : fires["fires"]) skipped += f["outcome"] == "skipped-overlap";
        return skipped >= 2;
      },
      10s));
  EXPECT_EQ(Fired(timer_id).size(), 1u);
  // Once the job is finished, the timer fires again.
  json job = Ok("POST", "/v1/topics/solo/reserve?timeout_ms=1000");
  // The fire it was made for (run_at); due_at is later when the fire was
  // handled late, as it may be on a loaded machine.
  ASSERT_EQ(ParseRfc3339(job["run_at"].get<std::string>()), first);
  Ok("POST", "/v1/jobs/" + std::to_string(job["id"].get<uint64_t>()) + "/finish",
     {{"lease", job["lease"]["lease"]}}, 204);
  ASSERT_TRUE(WaitUntil([&] { return Fired(timer_id).size() >= 2; }, 5s));
  EXPECT_GT(Fired(timer_id).back(), first + 1000);
}

TEST_F(TimerTest, PreviewMatchesWhatThenFiresAndEndTimeIsHonoured) {
  json preview = Ok("POST", "/v1/timers/preview",
                    {{"schedule", "*/2 * * * * *"}, {"timezone", "Asia/Shanghai"}, {"count", 3}});
  ASSERT_EQ(preview["fire_times"].size(), 3u);
  int64_t prev = 0;
  for (const json& t : preview["fire_times"]) {
    int64_t at = *ParseRfc3339(t.get<std::string>());
    EXPECT_EQ(at % 2000, 0);
    EXPECT_GT(at, prev);
    prev = at;
  }
  const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  json t = Ok("POST", "/v1/timers",
              {{"name", "even-seconds"},
               {"topic", "even"},
               {"schedule", "*/2 * * * * *"},
               {"end_at", FormatRfc3339Ms(now + 5000)}},
              201);
  const uint64_t id = t["id"].get<uint64_t>();
  // Every even second from the first fire up to end_at, and no other.
  const int64_t first = *ParseRfc3339(t["next_fire_at"].get<std::string>());
  std::vector<int64_t> promised;
  for (int64_t at = first; at <= now + 5000; at += 2000) promised.push_back(at);
  ASSERT_GE(promised.size(), 2u);
  // /next lists the fires still to come: those, less any that came while
  // the request was on its way.
  json next = Ok("GET", "/v1/timers/" + std::to_string(id) + "/next?count=5");
  std::vector<int64_t> to_come;
  for (const json& at : next["fire_times"]) to_come.push_back(*ParseRfc3339(at.get<std::string>()));
  ASSERT_FALSE(to_come.empty());
  ASSERT_LE(to_come.size(), promised.size());
  EXPECT_TRUE(std::equal(to_come.begin(), to_come.end(), promised.end() - to_come.size()))
      << "no fire after end_at, none skipped";
  ASSERT_TRUE(WaitUntil([&] { return Fired(id).size() >= promised.size(); }, 10s));
  EXPECT_EQ(Fired(id), promised);
  // After its end time the timer has no next fire and creates nothing more.
  ASSERT_TRUE(WaitUntil(
      [&] { return Ok("GET", "/v1/timers/" + std::to_string(id))["next_fire_at"].is_null(); },
      10s));
  std::this_thread::sleep_for(2500ms);  // two more would-be fire times pass
  EXPECT_EQ(Fired(id), promised);
}

TEST_F(TimerTest, EveryValidationErrorNamesItsFieldAndStoresNothing) {
  const json base = {{"name", "x"}, {"topic", "t"}, {"schedule", "0 9 * * *"}};
  auto field = [&](json patch) {
    json body = base;
    body.merge_patch(patch);
    HttpReply r = Call("POST", "/v1/timers", body);
    EXPECT_EQ(r.status, 400) << body.dump() << " -> " << r.body;
    return r.json()["field"];
  };
  EXPECT_EQ(field({{"schedule", "61 * * * *"}}), "schedule");
  EXPECT_EQ(field({{"schedule", "@fortnightly"}}), "schedule");
  EXPECT_EQ(field({{"timezone", "Mars/Olympus_Mons"}}), "timezone");
  EXPECT_EQ(field({{"topic", "-bad"}}), "topic");
  EXPECT_EQ(field({{"misfire", "sometimes"}}), "misfire");
  EXPECT_EQ(field({{"overlap", 1}}), "overlap");
  EXPECT_EQ(field({{"start_at", "tomorrow"}}), "start_at");
  EXPECT_EQ(field({{"start_at", "2027-01-02T00:00:00Z"}, {"end_at", "2027-01-01T00:00:00Z"}}),
            "end_at");
  EXPECT_EQ(field({{"template", {{"key", "k"}}}}), "template.key");
  EXPECT_EQ(field({{"template", {{"priority", -1}}}}), "template.priority");
  EXPECT_EQ(field({{"colour", "blue"}}), "colour");
  EXPECT_EQ(
      Call("POST", "/v1/timers", json{{"topic", "t"}, {"schedule", "* * * * *"}}).json()["field"],
      "name");
  EXPECT_EQ(Call("POST", "/v1/timers/preview", json{{"schedule", "* * *"}}).json()["field"],
            "schedule");
  EXPECT_TRUE(Ok("GET", "/v1/timers")["timers"].empty()) << "nothing was stored";
  // A taken name is a conflict (409), on create and on rename; and a missing
  // timer.
  const uint64_t first = Ok("POST", "/v1/timers", base, 201)["id"];
  HttpReply taken =
      Call("POST", "/v1/timers", json{{"name", "x"}, {"topic", "t"}, {"schedule", "0 10 * * *"}});
  EXPECT_EQ(taken.status, 409) << taken.body;
  EXPECT_EQ(taken.json()["field"], "name");
  const uint64_t second =
      Ok("POST", "/v1/timers", json{{"name", "y"}, {"topic", "t"}, {"schedule", "0 10 * * *"}},
         201)["id"];
  HttpReply rename = Call("PATCH", "/v1/timers/" + std::to_string(second), json{{"name", "x"}});
  EXPECT_EQ(rename.status, 409) << rename.body;
  EXPECT_EQ(rename.json()["field"], "name");
  EXPECT_EQ(Ok("GET", "/v1/timers/" + std::to_string(second))["name"], "y");
  EXPECT_EQ(Ok("GET", "/v1/timers/" + std::to_string(first))["name"], "x");
  EXPECT_EQ(server_->log().find("store: batch"), std::string::npos)
      << "a taken name is the client's conflict, not a store failure";
  EXPECT_EQ(Call("GET", "/v1/timers/999").status, 404);
  EXPECT_EQ(Call("GET", "/v1/timers/abc").json()["field"], "id");
}

}  // namespace
}  // namespace delayd::testing
