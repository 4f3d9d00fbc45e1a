// Push delivery to Kafka targets (kafka://BROKER[,BROKER...]/TOPIC) against
// librdkafka's mock cluster: three brokers speaking the Kafka protocol on
// loopback ports, in this test's process, read back by a librdkafka
// consumer. Every job lands once with its key, body and headers and reads
// back done; errors the cluster will not get over are dead letters with its
// error; a cluster that is down makes jobs wait and retry, never lost; and
// the URL rules.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <map>

#include "brokers/c11_threads_tsan.h"  // under TSan only: the mock cluster's threads
#include "common/base64.h"
#include "support/http.h"
#include "support/landing.h"
#include "support/mock_kafka.h"
#include "support/process.h"
#include "support/push_test.h"

namespace delayd::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

class KafkaPushTest : public PushTargetTest {
 protected:
  KafkaPushTest() : PushTargetTest("delayd-kpush", 20s) {}
  MockKafka kafka_;
};

TEST_F(KafkaPushTest, EveryJobLandsOnceWithItsKeyBodyAndHeadersAndReadsBackDone) {
  kafka_.CreateTopic("orders");
  ASSERT_EQ(Call("PUT", "/v1/topics/shop", {{"signing_secret", "s3cret"}}).status, 200);
  std::string bytes;
  for (int i = 0; i < 256; ++i) bytes += static_cast<char>(i);
  const json target = {{"url", kafka_.url("orders")}, {"headers", {{"X-Tenant", "acme"}}}};
  std::map<uint64_t, std::string> key_of, body_of;
  for (int i = 0; i < 40; ++i) {
    const std::string body = bytes + std::to_string(i);
    json job = {{"body_base64", Base64Encode(body)}, {"target", target}};
    if (i % 4 != 0) job["key"] = "order-" + std::to_string(8800 + i);
    json j = Submit("shop", job);
    const uint64_t id = j["id"];
    key_of[id] = i % 4 != 0 ? "order-" + std::to_string(8800 + i) : std::to_string(id);
    body_of[id] = body;
  }
  for (const auto& [id, key] : key_of) ASSERT_TRUE(WaitState(id, "done")) << Job(id);
  std::vector<KafkaRecord> got = kafka_.Consume("orders", 41, 3s);  // waits 3 s for one too many
  ASSERT_EQ(got.size(), 40u) << "each job once";
  for (const KafkaRecord& r : got) {
    const uint64_t id = std::stoull(r.headers.at("Delayd-Job-Id"));
    ASSERT_TRUE(key_of.count(id)) << id;
    EXPECT_EQ(r.key, key_of[id]) << "the job's key, or its id, is the record's key";
    EXPECT_EQ(r.value, body_of[id]) << "the body byte for byte";
    EXPECT_EQ(r.headers.at("Delayd-Topic"), "shop");
    EXPECT_EQ(r.headers.at("Delayd-Attempt"), "1");
    EXPECT_EQ(r.headers.at("X-Tenant"), "acme");
    EXPECT_TRUE(r.headers.count("Delayd-Signature")) << "signed as over HTTP";
    EXPECT_TRUE(r.headers.count("Delayd-Due-At"));
  }
  json attempts =
      Call("GET", "/v1/jobs/" + std::to_string(key_of.begin()->first) + "/attempts").json();
  ASSERT_EQ(attempts["attempts"].size(), 1u) << attempts;
  EXPECT_EQ(attempts["attempts"][0]["outcome"], "ok") << attempts;
  EXPECT_EQ(Job(key_of.begin()->first)["target_kind"], "kafka");
  const std::string metrics = Call("GET", "/metrics").body;
  EXPECT_NE(metrics.find("delayd_push_attempts_total{kind=\"kafka\",outcome=\"ok\"} 40\n"),
            std::string::npos)
      << metrics;
}

TEST_F(KafkaPushTest, ARecordTheClusterRefusesIsADeadLetterWithItsError) {
  // A cluster without the topic (auto-creation off) answers this.
  rd_kafka_mock_topic_set_error(kafka_.cluster(), "gone", RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART);
  const json retry = {{"initial_backoff_ms", 100}, {"jitter", false}, {"max_attempts", 5}};
  json j =
      Submit("t", {{"body", "x"}, {"target", {{"url", kafka_.url("gone")}}}, {"retry", retry}});
  ASSERT_TRUE(WaitState(j["id"], "buried")) << Job(j["id"]) << server_->log();
  json dead = Job(j["id"]);
  EXPECT_EQ(dead["attempts"], 1) << "not retried";
  const std::string error = dead["last_error"].get<std::string>();
  EXPECT_NE(error.find("UNKNOWN_TOPIC"), std::string::npos) << error;
  EXPECT_NE(error.find("not retried"), std::string::npos) << error;
}

TEST_F(KafkaPushTest, AClusterThatIsDownMakesJobsWaitAndRetryAndLosesNothing) {
  kafka_.CreateTopic("orders");
  kafka_.SetBrokersUp(false);
  const json retry = {{"initial_backoff_ms", 200}, {"max_backoff_ms", 500}, {"max_attempts", 100}};
  const json target = {{"url", kafka_.url("orders")}, {"timeout_ms", 500}};
  std::vector<uint64_t> ids;
  for (int i = 0; i < 10; ++i) {
    ids.push_back(Submit("t", {{"body", i}, {"target", target}, {"retry", retry}})["id"]);
  }
  // Each fails while the cluster is down, and waits to be tried again.
  ASSERT_TRUE(WaitUntil([&] { return Job(ids.back())["attempts"].get<int>() >= 2; }, 20s))
      << Job(ids.back()) << server_->log();
  for (uint64_t id : ids) EXPECT_NE(Job(id)["state"], "done") << Job(id);
  EXPECT_NE(Job(ids[0])["last_error"].get<std::string>().find("MSG_TIMED_OUT"), std::string::npos)
      << Job(ids[0]);
  kafka_.SetBrokersUp(true);
  for (uint64_t id : ids) ASSERT_TRUE(WaitState(id, "done", 30s)) << Job(id);
  std::vector<KafkaRecord> got = kafka_.Consume("orders", ids.size(), 20s);
  std::map<uint64_t, int> seen;
  for (const KafkaRecord& r : got) ++seen[std::stoull(r.headers.at("Delayd-Job-Id"))];
  for (uint64_t id : ids) EXPECT_GE(seen[id], 1) << "job " << id << " was lost";
}

// Partition leaders move to other brokers while jobs flow: the producer
// follows them, and its idempotence keeps each record once.
//
// One delivery at a time (the topic's max_concurrency): when a partition
// moves with several of its records in flight, librdkafka counts a record
// that failed on the old leader as written once a later one succeeds on the
// new leader ("implicitly acked"), which is right only because a Kafka
// broker refuses a sequence number with a gap. Debian's mock cluster
// (librdkafka 2.0) checks sequences only for transactional producers, so
// there the earlier record would be lost to the test, not to Kafka.
TEST_F(KafkaPushTest, LeadersMovingMidRunLoseNothingAndDuplicateNothing) {
  kafka_.CreateTopic("orders");
  ASSERT_EQ(Call("PUT", "/v1/topics/t", {{"max_concurrency", 1}}).status, 200);
  const json target = {{"url", kafka_.url("orders")}, {"timeout_ms", 10000}};
  std::vector<uint64_t> ids;
  for (int i = 0; i < 150; ++i) {
    ids.push_back(Submit("t", {{"body", i}, {"delay", i * 20}, {"target", target}})["id"]);
  }
  ASSERT_TRUE(WaitState(ids.front(), "done")) << Job(ids.front()) << server_->log();
  for (int32_t leader : {2, 3}) {
    for (int32_t p = 0; p < MockKafka::kPartitions; ++p) {
      ASSERT_EQ(rd_kafka_mock_partition_set_leader(kafka_.cluster(), "orders", p, leader),
                RD_KAFKA_RESP_ERR_NO_ERROR);
    }
    // Jobs due after the move land through the new leaders before the next.
    const uint64_t later = ids[(leader - 1) * 50];
    ASSERT_TRUE(WaitState(later, "done")) << Job(later) << server_->log();
  }
  for (uint64_t id : ids) ASSERT_TRUE(WaitState(id, "done", 30s)) << Job(id) << server_->log();
  std::vector<KafkaRecord> got = kafka_.Consume("orders", ids.size() + 1, 3s);
  std::map<uint64_t, int> seen;
  for (const KafkaRecord& r : got) ++seen[std::stoull(r.headers.at("Delayd-Job-Id"))];
  for (uint64_t id : ids) EXPECT_EQ(seen[id], 1) << "job " << id;
  EXPECT_EQ(got.size(), ids.size());
}

// kill -9 while records are in flight: after the restart every job lands,
// and only those not yet done at the kill may land twice (at least once).
TEST_F(KafkaPushTest, KillNineMidFlightDuplicatesAtMostTheJobsInFlight) {
  kafka_.CreateTopic("orders");
  // Slow acknowledgements keep records in flight when the kill comes.
  for (int32_t b = 1; b <= 3; ++b) rd_kafka_mock_broker_set_rtt(kafka_.cluster(), b, 300);
  const json target = {{"url", kafka_.url("orders")}, {"timeout_ms", 5000}};
  std::vector<uint64_t> ids;
  for (int i = 0; i < 200; ++i) {
    ids.push_back(Submit("t", {{"body", i}, {"target", target}})["id"]);
  }
  ASSERT_TRUE(WaitUntil([&] { return Job(ids.front())["attempts"].get<int>() >= 1; }, 20s));
  server_->Kill9();
  // The cluster is down while the restarted delayd is asked what the kill
  // left done, so that nothing is delivered meanwhile.
  kafka_.SetBrokersUp(false);
  for (int32_t b = 1; b <= 3; ++b) rd_kafka_mock_broker_set_rtt(kafka_.cluster(), b, 0);
  server_->Restart();
  size_t done_before = 0;
  for (uint64_t id : ids) done_before += Job(id)["state"] == "done";
  kafka_.SetBrokersUp(true);
  for (uint64_t id : ids) ASSERT_TRUE(WaitState(id, "done", 30s)) << Job(id);
  std::vector<KafkaRecord> got = kafka_.Consume("orders", 2 * ids.size(), 5s);
  std::map<uint64_t, int> seen;
  for (const KafkaRecord& r : got) ++seen[std::stoull(r.headers.at("Delayd-Job-Id"))];
  ExpectAtLeastOnceAndDuplicatesOnlyInFlight(seen, ids, done_before);
}

TEST_F(KafkaPushTest, APropertiesFileNamedByTheTargetIsUsedAndReReadOnSighup) {
  kafka_.CreateTopic("orders");
  const std::string dir = MakeTempDir("delayd-kprops");
  const std::string file = dir + "/orders.properties";
  // TLS to the mock cluster's plain listener: every attempt fails, which
  // shows the file is what the producer runs on.
  WriteFile(file, "# the orders cluster\nsecurity.protocol=ssl\nclient.id=${CLIENT}\n");
  server_ = std::make_unique<DelaydServer>(
      MakeTempDir("delayd-kpush"), std::vector<std::string>{"--kafka-properties", "orders=" + file},
      std::vector<std::string>{"CLIENT=delayd-orders"});
  const json retry = {{"initial_backoff_ms", 200}, {"max_backoff_ms", 300}, {"max_attempts", 200}};
  const json target = {{"url", kafka_.url("orders") + "?properties=orders"}, {"timeout_ms", 800}};
  json j = Submit("t", {{"body", "over tls"}, {"target", target}, {"retry", retry}});
  ASSERT_TRUE(WaitUntil([&] { return Job(j["id"])["attempts"].get<int>() >= 2; }, 20s))
      << Job(j["id"]) << server_->log();
  const std::string error = Job(j["id"])["last_error"].get<std::string>();
  EXPECT_NE(error.find("SSL"), std::string::npos) << "the handshake's failure: " << error;
  EXPECT_EQ(error.find("delayd-orders"), std::string::npos) << "no setting's value: " << error;

  // A file that cannot be read on SIGHUP changes nothing, and says why.
  WriteFile(file, "security.protocol=plaintext\nacks=0\n");
  ASSERT_EQ(kill(server_->pid(), SIGHUP), 0);
  ASSERT_TRUE(WaitUntil(
      [&] {
        return server_->log().find("SIGHUP: kept the Kafka properties in use") != std::string::npos;
      },
      10s))
      << server_->log();
  EXPECT_NE(server_->log().find("line 2 (acks)"), std::string::npos) << server_->log();
  const int attempts = Job(j["id"])["attempts"].get<int>();
  ASSERT_TRUE(WaitUntil([&] { return Job(j["id"])["attempts"].get<int>() > attempts + 1; }, 20s));
  EXPECT_NE(Job(j["id"])["state"], "done");

  // Fixed on disk and SIGHUP: the job that kept failing lands.
  WriteFile(file, "security.protocol=plaintext\nclient.id=${CLIENT}\n");
  ASSERT_EQ(kill(server_->pid(), SIGHUP), 0);
  ASSERT_TRUE(WaitState(j["id"], "done", 20s)) << Job(j["id"]) << server_->log();
  std::vector<KafkaRecord> got = kafka_.Consume("orders", 1, 10s);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].value, "\"over tls\"") << "a JSON body, byte for byte";

  // A name the server was not given is refused at submission.
  HttpReply r =
      Call("POST", "/v1/topics/t/jobs",
           {{"body", 1}, {"target", {{"url", kafka_.url("orders") + "?properties=payments"}}}});
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.json().value("field", ""), "target.url") << r.body;
  EXPECT_NE(r.body.find("payments"), std::string::npos) << r.body;
}

TEST_F(KafkaPushTest, APropertiesFileThatCannotBeReadStopsTheStart) {
  const std::string dir = MakeTempDir("delayd-kprops");
  const std::string file = dir + "/bad.properties";
  WriteFile(file, "sasl.password=${DELAYD_TEST_UNSET_VARIABLE}\n");
  auto [status, log] = RefusedStart({"--data-dir", dir + "/data", "--beanstalk", "127.0.0.1:0",
                                     "--http", "127.0.0.1:0", "--kafka-properties", "bad=" + file});
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_NE(WEXITSTATUS(status), 0);
  EXPECT_NE(log.find("bad.properties) line 1 (sasl.password): ${DELAYD_TEST_UNSET_VARIABLE} is "
                     "not set"),
            std::string::npos)
      << log;
}

TEST_F(KafkaPushTest, TargetsThatCannotBeProducedToAreRefusedNamingTheField) {
  auto refused = [&](const json& target) {
    HttpReply r = Call("POST", "/v1/topics/t/jobs", {{"body", 1}, {"target", target}});
    EXPECT_EQ(r.status, 400) << target << r.body;
    return r.json().value("field", "");
  };
  EXPECT_EQ(refused({{"url", "kafka://127.0.0.1:9092"}}), "target.url") << "no topic";
  EXPECT_EQ(refused({{"url", "kafka://127.0.0.1:9092/bad topic"}}), "target.url");
  EXPECT_EQ(refused({{"url", "kafka://127.0.0.1:9092,/orders"}}), "target.url");
  EXPECT_EQ(refused({{"url", "kafka://127.0.0.1:9092/orders?properties=none"}}), "target.url");
  EXPECT_EQ(refused({{"url", "kafka://127.0.0.1:9092,169.254.169.254:9092/orders"}}), "target.url")
      << "the target policy judges every broker";
  EXPECT_EQ(refused({{"url", "kafka://127.0.0.1:9092/orders"}, {"method", "PUT"}}),
            "target.method");
  EXPECT_EQ(Call("GET", "/v1/jobs?topic=t").json()["jobs"].size(), 0u) << "nothing was kept";
}

}  // namespace
}  // namespace delayd::testing
