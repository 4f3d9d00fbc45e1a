// What only the PostgreSQL store does: its schema and versions, bytes that
// are not text, a lost connection. The Store contract is in store_test.cc.
#include "store/postgres/pg_store.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>

#include "common/testing/loopback_socket.h"
#include "store/postgres/pg_schema.h"
#include "store/postgres/pg_statements.h"
#include "store/testing/inbox.h"
#include "store/testing/pg_test_db.h"

namespace delayd::store {
namespace {

// The leading column of each index of the jobs table.
std::map<std::string, std::string> LeadingColumnsOfJobsIndexes(PGconn* c) {
  PGresult* r = PQexec(c,
                       "SELECT i.indexrelid::regclass::text, a.attname FROM pg_index i JOIN "
                       "pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0] "
                       "WHERE i.indrelid = 'jobs'::regclass");
  std::map<std::string, std::string> out;
  for (int i = 0; i < PQntuples(r); ++i) out[PQgetvalue(r, i, 0)] = PQgetvalue(r, i, 1);
  PQclear(r);
  return out;
}

// The scans of the jobs table in an EXPLAIN's plan that no condition on
// an index's leading column bounds: a sequential scan, or an index walked
// whole. A min() or max() is one row from an end of an index (a Limit over
// `IS NOT NULL`). push_tubes walks jobs_push by design (the tubes of a new
// owner's ready push jobs, at a change of owner).
std::vector<std::string> UnboundedScansOfJobs(std::string_view statement, const std::string& plan,
                                              const std::map<std::string, std::string>& leading) {
  static const std::regex kScan(
      R"((Seq Scan|Index Scan|Index Only Scan)( Backward)? (using (\w+) )?on jobs\b)"
      R"(|Bitmap Index Scan on (jobs_\w+))");
  std::vector<std::string> lines;
  std::istringstream in(plan);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::vector<std::string> out;
  for (size_t i = 0; i < lines.size(); ++i) {
    std::smatch m;
    if (!std::regex_search(lines[i], m, kScan)) continue;
    const std::string index = m[4].matched ? m[4].str() : m[5].str();
    if (statement == "push_tubes" && index == "jobs_push") continue;
    bool bounded = false;
    if (auto lead = leading.find(index); lead != leading.end()) {
      const bool one_row = i > 0 && lines[i - 1].find("Limit") != std::string::npos;
      const std::regex on_lead("\\(" + lead->second + " (=|<|>|<=|>=) " +
                               (one_row ? "|\\(" + lead->second + " IS NOT NULL\\)" : ""));
      // The node's details, until the next node.
      for (size_t k = i + 1; k < lines.size() && lines[k].find("->") == std::string::npos; ++k) {
        if (lines[k].find("Index Cond:") != std::string::npos &&
            std::regex_search(lines[k], on_lead)) {
          bounded = true;
        }
      }
    }
    if (!bounded) out.push_back(lines[i]);
  }
  return out;
}

// A session set up as the writer's and the claimer's are
// (pg::kGenericPlans), with every statement prepared.
class GenericPlanSession {
 public:
  explicit GenericPlanSession(const std::string& uri) : c_(PQconnectdb(uri.c_str())) {}
  ~GenericPlanSession() { PQfinish(c_); }
  GenericPlanSession(const GenericPlanSession&) = delete;
  GenericPlanSession& operator=(const GenericPlanSession&) = delete;

  // Empty when every statement is prepared, else what failed.
  std::string Prepare() {
    if (PQstatus(c_) != CONNECTION_OK) return PQerrorMessage(c_);
    PQclear(PQexec(c_, pg::kGenericPlans));
    leading_ = LeadingColumnsOfJobsIndexes(c_);
    for (const pg::Statement& st : pg::Statements()) {
      PGresult* p = PQprepare(c_, st.name, st.sql.c_str(), static_cast<int>(st.types.size()),
                              st.types.data());
      const bool ok = PQresultStatus(p) == PGRES_COMMAND_OK;
      PQclear(p);
      if (!ok) return std::string(st.name) + ": " + PQerrorMessage(c_);
    }
    return "";
  }
  // The statement's plan (planned now if it has none), or why EXPLAIN
  // failed; a generic plan is the same whatever the values, so NULLs do.
  std::pair<bool, std::string> Explain(const pg::Statement& st) {
    std::string q = std::string("EXPLAIN EXECUTE ") + st.name;
    for (size_t i = 0; i < st.types.size(); ++i) q += i == 0 ? "(NULL" : ", NULL";
    if (!st.types.empty()) q += ")";
    PGresult* r = PQexec(c_, q.c_str());
    const bool ok = PQresultStatus(r) == PGRES_TUPLES_OK;
    std::string plan = ok ? "" : PQerrorMessage(c_);
    for (int i = 0; i < PQntuples(r); ++i) plan += std::string(PQgetvalue(r, i, 0)) + "\n";
    PQclear(r);
    return {ok, plan};
  }
  // Explains `st` and expects its plan to be bounded (UnboundedScansOfJobs).
  void ExpectBounded(const pg::Statement& st) {
    const auto [ok, plan] = Explain(st);
    EXPECT_TRUE(ok) << st.name << ": " << plan;
    EXPECT_EQ(UnboundedScansOfJobs(st.name, plan, leading_), std::vector<std::string>())
        << st.name << ":\n"
        << plan;
  }

 private:
  PGconn* c_;
  std::map<std::string, std::string> leading_;
};

// 20,000 jobs in every state, over 16 shards and 50 tubes, copied from job 1.
constexpr const char* kManyJobs =
    "INSERT INTO jobs SELECT (jsonb_populate_record(j, jsonb_build_object('id', j.id + g, "
    "'shard', g % 16, 'state', g % 5, 'tube', 't' || (g % 50), 'due_ms', g, 'due_min', "
    "g / 600, 'deadline_ms', CASE WHEN g % 5 = 4 THEN g END, 'done_ms', CASE WHEN g % 5 = 3 "
    "THEN g END))).* FROM jobs j, generate_series(1, 20000) g";

class PgStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_FALSE(db_.uri().empty()) << db_.error(); }

  Result<std::unique_ptr<PgStore>> Open(int shards = 256) {
    return PgStore::Open({.conninfo = db_.uri(), .shards = shards}, inbox_.executor());
  }
  Status Apply(Store& store, Mutation m) {
    std::atomic<int> done{0};
    Status out;
    store.Submit(std::move(m), [&](const Status& s) {
      out = s;
      ++done;
    });
    inbox_.RunUntil(done, 1);
    return out;
  }
  // The integer the one-row query `sql` returns on the test database.
  int64_t Query(const std::string& sql) {
    PGconn* c = PQconnectdb(db_.uri().c_str());
    PGresult* r = PQexec(c, sql.c_str());
    int64_t v = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1
                    ? std::stoll(PQgetvalue(r, 0, 0))
                    : -1;
    PQclear(r);
    PQfinish(c);
    return v;
  }
  // That `t`, a tube's counts, is what a count of the jobs table finds.
  void ExpectTheTableCounts(const TubeCount& t) {
    auto count = [&](const std::string& where) {
      return static_cast<uint64_t>(
          Query("SELECT count(*) FROM jobs WHERE tube = '" + t.tube + "' AND " + where));
    };
    EXPECT_EQ(t.ready, count("state = 0")) << t.tube;
    EXPECT_EQ(t.urgent, count("state = 0 AND pri < 1024")) << t.tube;
    EXPECT_EQ(t.delayed, count("state = 1")) << t.tube;
    EXPECT_EQ(t.buried, count("state = 2")) << t.tube;
    EXPECT_EQ(t.reserved, count("state = 4")) << t.tube;
  }
  static JobRecord Job(uint64_t id, std::string key = "") {
    JobRecord j;
    j.id = id;
    j.tube = "t";
    j.key = std::move(key);
    j.body = "b";
    return j;
  }

  testing::PgTestDb db_;
  testing::Inbox inbox_;
};

TEST_F(PgStoreTest, ANewDatabaseGetsTheSchemaAndItsShardCountOnce) {
  auto s = Open(16);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ((*s)->shards(), 16);
  EXPECT_EQ(Query("SELECT max(version) FROM delayd_schema"), pg::SchemaVersion());
  s->reset();
  // An existing database keeps its shard count, whatever a later start asks.
  auto again = Open(64);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ((*again)->shards(), 16);
  EXPECT_EQ(Query("SELECT count(*) FROM delayd_schema"), pg::SchemaVersion());
  // Version 2: a lease row per shard, each free (doc/cluster.md).
  EXPECT_EQ(Query("SELECT count(*) FROM shard_leases WHERE owner IS NULL AND epoch = 0"), 16);
}

// Version 6 counts the jobs a database of version 5 already holds, per
// tube and state (done jobs not), and from then on keeps the counts.
TEST_F(PgStoreTest, TheCountsMigrationCountsTheJobsAlreadyStored) {
  auto s = Open(16);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  s->reset();
  // Back to version 5, then jobs written by a delayd of that version.
  ASSERT_TRUE(
      db_.Exec("DROP TABLE job_counts, job_deltas; DROP FUNCTION delayd_count_jobs CASCADE; "
               "DROP FUNCTION delayd_truncate_counts CASCADE; DROP FUNCTION delayd_fold_counts; "
               "DELETE FROM delayd_schema WHERE version >= 6"))
      << db_.error();
  ASSERT_TRUE(
      db_.Exec("INSERT INTO jobs (shard, id, tube, pri, state, due_ms, due_min, "
               "delay_ms, ttr_ms, created_ms, run_at_ms, reserves, timeouts, releases, "
               "buries, kicks, body) SELECT i % 16, i, 't' || (i % 2), i % 2000, i % 5, "
               "0, 0, 0, 1000, 0, 0, 0, 0, 0, 0, 0, '' FROM generate_series(1, 100) i"))
      << db_.error();
  auto again = Open(16);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(Query("SELECT max(version) FROM delayd_schema"), pg::SchemaVersion());
  auto counts = (*again)->CountJobs(std::nullopt);
  ASSERT_TRUE(counts.ok()) << counts.status().ToString();
  ASSERT_EQ(counts->size(), 2u);
  for (const TubeCount& t : *counts) {
    ExpectTheTableCounts(t);
    EXPECT_EQ(t.ready + t.delayed + t.buried + t.reserved, 40u) << t.tube;  // 10 done
  }
  ASSERT_TRUE(Apply(**again, Mutation::Delete(10)).ok());  // t0, state 0
  auto after = (*again)->CountJobs("t0");
  ASSERT_TRUE(after.ok());
  ASSERT_EQ(after->size(), 1u);
  EXPECT_EQ((*after)[0].ready, 9u);
}

// Version 7 sums the rows of version 6's sessions into one row per tube,
// state and urgency, and from then on the trigger appends deltas.
TEST_F(PgStoreTest, TheDeltasMigrationSumsTheRowsOfEachSession) {
  auto s = Open(16);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_TRUE(Apply(**s, Mutation::Insert(Job(1))).ok());
  ASSERT_TRUE(Apply(**s, Mutation::Insert(Job(2))).ok());
  s->reset();
  // Back to version 6: the counts in rows of three sessions (two of them
  // for tube t's ready jobs), and version 6's functions the migration drops.
  ASSERT_TRUE(
      db_.Exec("DROP TABLE job_counts, job_deltas; DROP FUNCTION delayd_fold_counts; "
               "DROP FUNCTION delayd_truncate_counts CASCADE; "
               "DELETE FROM delayd_schema WHERE version >= 7; "
               "CREATE TABLE job_counts (slot text NOT NULL, tube text NOT NULL, state smallint "
               "NOT NULL, urgent boolean NOT NULL, n bigint NOT NULL, PRIMARY KEY (slot, tube, "
               "state, urgent)); "
               "INSERT INTO job_counts VALUES ('', 't', 0, true, 3), ('1/2', 't', 0, true, -1), "
               "('3/4', 'gone', 1, false, 1), ('5/6', 'gone', 1, false, -1); "
               "CREATE FUNCTION delayd_session(pid integer, started timestamptz) RETURNS text "
               "LANGUAGE sql IMMUTABLE AS $$SELECT ''::text$$; "
               "CREATE FUNCTION delayd_fold_counts() RETURNS void LANGUAGE sql AS $$SELECT$$;"))
      << db_.error();
  auto again = Open(16);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(Query("SELECT max(version) FROM delayd_schema"), pg::SchemaVersion());
  EXPECT_EQ(Query("SELECT count(*) FROM job_counts"), 1);
  auto counts = (*again)->CountJobs(std::nullopt);
  ASSERT_TRUE(counts.ok()) << counts.status().ToString();
  ASSERT_EQ(counts->size(), 1u);
  EXPECT_EQ((*counts)[0].tube, "t");
  EXPECT_EQ((*counts)[0].ready, 2u);
  ASSERT_TRUE(Apply(**again, Mutation::Delete(1)).ok());
  auto after = (*again)->CountJobs("t");
  ASSERT_TRUE(after.ok());
  ASSERT_EQ(after->size(), 1u);
  EXPECT_EQ((*after)[0].ready, 1u);
}

// Version 8 rewrites jobs with the columns a state change writes first
// and fillfactor 70; every row comes through whole, and the counts, the
// indexes and the triggers serve the new table.
TEST_F(PgStoreTest, TheColumnOrderMigrationKeepsEveryRowAndItsCounts) {
  auto s = Open(16);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  s->reset();
  // Version 7's table: its columns in their order then, with rows of every
  // state, nulls and not, and bytes of every value.
  const std::string v7_columns =
      "shard, id, tube, pri, state, due_ms, due_min, delay_ms, ttr_ms, created_ms, done_ms, "
      "run_at_ms, reserves, timeouts, releases, buries, kicks, key, spec, attempt_log, "
      "last_error, body, ver, reserved_by, deadline_ms, push";
  ASSERT_TRUE(db_.Exec(
      "DELETE FROM delayd_schema WHERE version >= 8; DROP TABLE jobs; "
      "CREATE TABLE jobs AS SELECT (i % 16)::int2 AS shard, i::int8 AS id, 't' || (i % 3) AS "
      "tube, (i % 2000)::int8 AS pri, (i % 5)::int2 AS state, (i * 7)::int8 AS due_ms, (i / "
      "60)::int8 AS due_min, 10::int8 AS delay_ms, 1000::int8 AS ttr_ms, i::int8 AS created_ms, "
      "CASE WHEN i % 5 = 3 THEN i::int8 END AS done_ms, (i * 3)::int8 AS run_at_ms, (i % "
      "4)::int8 AS reserves, 1::int8 AS timeouts, 2::int8 AS releases, 3::int8 AS buries, "
      "4::int8 AS kicks, CASE WHEN i % 2 = 0 THEN int4send(i) END AS key, CASE WHEN i % 3 = 0 "
      "THEN '\\x7b7d'::bytea END AS spec, CASE WHEN i % 7 = 0 THEN '\\x00ff'::bytea END AS "
      "attempt_log, CASE WHEN i % 11 = 0 THEN 'no'::bytea END AS last_error, "
      "decode(repeat(lpad(to_hex(i % 256), 2, '0'), 3), 'hex') || '\\x000d0a'::bytea AS body, (i % "
      "9)::int8 "
      "AS ver, CASE WHEN i % 5 = 4 THEN 'node' || (i % 3) END AS reserved_by, CASE WHEN i % 5 = "
      "4 THEN i::int8 + 1000 END AS deadline_ms, (i % 2)::int2 AS push "
      "FROM generate_series(16, 1015) i; "
      "ALTER TABLE jobs ALTER COLUMN body SET NOT NULL; ALTER TABLE jobs ADD PRIMARY KEY "
      "(shard, id); "
      "DELETE FROM job_deltas; DELETE FROM job_counts; "
      "INSERT INTO job_counts SELECT tube, state, state = 0 AND pri < 1024, count(*) FROM jobs "
      "WHERE state <> 3 GROUP BY 1, 2, 3"))
      << db_.error();
  auto digest = [&] {
    return Query(
        "SELECT ('x' || substr(md5(string_agg(j::text, ',' ORDER BY shard, id)), 1, "
        "15))::bit(60)::int8 FROM (SELECT " +
        v7_columns + " FROM jobs) j");
  };
  const int64_t before = digest();
  ASSERT_GT(before, 0);
  auto again = Open(16);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(Query("SELECT max(version) FROM delayd_schema"), pg::SchemaVersion());
  EXPECT_EQ(digest(), before) << "every row as it was";
  EXPECT_EQ(Query("SELECT attnum FROM pg_attribute WHERE attrelid = 'jobs'::regclass AND "
                  "attname = 'state'"),
            4);
  EXPECT_EQ(Query("SELECT count(*) FROM pg_class WHERE relname = 'jobs' AND 'fillfactor=70' = "
                  "ANY(reloptions)"),
            1);
  // Version 9: one index finds a job by id, the primary key (id, shard);
  // version 11 adds jobs_buried_seq.
  EXPECT_EQ(Query("SELECT count(*) FROM pg_indexes WHERE tablename = 'jobs'"), 10);
  EXPECT_EQ(Query("SELECT count(*) FROM pg_indexes WHERE tablename = 'jobs' AND indexname = "
                  "'jobs_pkey' AND indexdef LIKE '%UNIQUE INDEX jobs_pkey ON public.jobs USING "
                  "btree (id, shard)'"),
            1);
  // The rows were the same, so the counts kept before are still true, and
  // the triggers keep them as the new table changes.
  auto counts = (*again)->CountJobs(std::nullopt);
  ASSERT_TRUE(counts.ok()) << counts.status().ToString();
  ASSERT_EQ(counts->size(), 3u);
  for (const TubeCount& t : *counts) ExpectTheTableCounts(t);
  ASSERT_TRUE(Apply(**again, Mutation::Insert(Job(5000))).ok());  // tube t, ready
  auto t = (*again)->CountJobs("t");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->size(), 1u);
  EXPECT_EQ((*t)[0].ready, 1u);
  EXPECT_EQ(Query("SELECT count(*) FROM jobs WHERE id = 5000"), 1);
  // A job is found by its id alone through the key, not by a walk of the table.
  ASSERT_TRUE(
      db_.Exec("CREATE FUNCTION plan_of(q text) RETURNS SETOF text LANGUAGE plpgsql AS "
               "$f$ BEGIN RETURN QUERY EXECUTE 'EXPLAIN ' || q; END $f$"))
      << db_.error();
  EXPECT_EQ(Query("SELECT count(*) FROM plan_of('SELECT body FROM jobs WHERE id = 17') p WHERE "
                  "p LIKE '%Index Scan using jobs_pkey on jobs%'"),
            1);
}

// A cluster node that keeps running while another migrates the database
// to version 8 (a rolling upgrade) writes on: its prepared statements name
// columns, never positions, and PostgreSQL plans them again for the new
// table.
TEST_F(PgStoreTest, AStoreRunningThroughTheColumnOrderMigrationWritesOn) {
  auto node = [&](const char* id) {
    return PgStore::Open({.conninfo = db_.uri(), .shards = 16, .node_id = id}, inbox_.executor());
  };
  auto running = node("a");
  ASSERT_TRUE(running.ok()) << running.status().ToString();
  for (uint64_t id = 1; id <= 3; ++id) {
    ASSERT_TRUE(Apply(**running, Mutation::Insert(Job(id))).ok());
  }
  ASSERT_TRUE(db_.Exec("DELETE FROM delayd_schema WHERE version >= 8")) << db_.error();
  const int64_t table = Query("SELECT 'jobs'::regclass::oid::int8");
  auto upgraded = node("b");
  ASSERT_TRUE(upgraded.ok()) << upgraded.status().ToString();
  ASSERT_NE(Query("SELECT 'jobs'::regclass::oid::int8"), table) << "the table was rewritten";
  ASSERT_TRUE(Apply(**running, Mutation::Insert(Job(4, "k"))).ok());
  ASSERT_TRUE(Apply(**running, Mutation::Delete(1)).ok());
  auto counts = (*running)->CountJobs("t");
  ASSERT_TRUE(counts.ok()) << counts.status().ToString();
  ASSERT_EQ(counts->size(), 1u);
  EXPECT_EQ((*counts)[0].ready, 3u);
  EXPECT_EQ(Query("SELECT count(*) FROM jobs WHERE id IN (2, 3, 4)"), 3);
}

// The store folds the deltas its changes append, and every few folds it
// made vacuums job_deltas, so that the rows folded do not stay in its
// pages until autovacuum comes.
// Version 11 places each job buried before it by its id, the order a
// restart brought buried jobs back in then: one node's windows read them in
// that order, and a job buried after the migration comes after them all.
TEST_F(PgStoreTest, TheBuryOrderMigrationKeepsTheBuriedJobsInIdOrder) {
  auto s = Open(16);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  for (uint64_t id = 1; id <= 4; ++id) ASSERT_TRUE(Apply(**s, Mutation::Insert(Job(id))).ok());
  s->reset();
  // Back to version 10, with jobs 3, 1 and 4 buried by a delayd of it.
  ASSERT_TRUE(
      db_.Exec("DROP INDEX jobs_buried_seq; ALTER TABLE jobs DROP COLUMN bury_seq; "
               "DELETE FROM delayd_schema WHERE version >= 11; "
               "UPDATE jobs SET state = 2 WHERE id IN (1, 3, 4)"))
      << db_.error();
  auto again = Open(16);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(Query("SELECT max(version) FROM delayd_schema"), pg::SchemaVersion());
  auto r = (*again)->Recover(0);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->max_bury_seq, 4u);
  JobRecord later = Job(2);
  later.state = StoredState::kBuried;
  later.bury_seq = r->max_bury_seq + 1;
  ASSERT_TRUE(Apply(**again, Mutation::Update(later)).ok());
  auto rows = (*again)->ScanSet("t", JobSet::kBuried, {}, 10);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  std::vector<uint64_t> ids;
  for (const JobRecord& j : *rows) ids.push_back(j.id);
  EXPECT_EQ(ids, (std::vector<uint64_t>{1, 3, 4, 2}));
}

// A node of its own on a database a cluster used ends the reservations its
// nodes held there: their jobs are counted ready, and its windows read them
// in their order with the others.
TEST_F(PgStoreTest, OneNodeRecoversTheJobsAClusterHeldAsReady) {
  auto s = Open(16);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  for (uint64_t id = 1; id <= 3; ++id) ASSERT_TRUE(Apply(**s, Mutation::Insert(Job(id))).ok());
  s->reset();
  ASSERT_TRUE(db_.Exec(
      "UPDATE jobs SET state = 4, reserved_by = 'node-a', deadline_ms = 1 WHERE id IN (1, 3)"))
      << db_.error();
  auto again = Open(16);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  ASSERT_TRUE((*again)->ScansSets());
  auto r = (*again)->Recover(0);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->jobs.empty()) << "ready jobs come as counts";
  ASSERT_EQ(r->sets.size(), 1u);
  EXPECT_EQ(r->sets[0].set, JobSet::kReady);
  EXPECT_EQ(r->sets[0].jobs, 3u);
  auto rows = (*again)->ScanSet("t", JobSet::kReady, {}, 10);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  ASSERT_EQ(rows->size(), 3u);
  for (const JobRecord& j : *rows) {
    EXPECT_EQ(j.state, StoredState::kReady) << j.id;
    EXPECT_TRUE(j.reserved_by.empty()) << j.id;
  }
  EXPECT_EQ(Query("SELECT count(*) FROM jobs WHERE state = 4"), 0);
}

TEST_F(PgStoreTest, TheStoreFoldsTheCountDeltasAndVacuumsThem) {
  auto s = PgStore::Open(
      {.conninfo = db_.uri(), .shards = 16, .fold_counts_ms = 20, .vacuum_deltas_every = 3},
      inbox_.executor());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const int64_t vacuums =
      Query("SELECT vacuum_count FROM pg_stat_user_tables WHERE relname = 'job_deltas'");
  for (uint64_t id = 1; id <= 5; ++id) ASSERT_TRUE(Apply(**s, Mutation::Insert(Job(id))).ok());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (Query("SELECT count(*) FROM job_deltas WHERE state <> -1") != 0 ||
         Query("SELECT vacuum_count FROM pg_stat_user_tables WHERE relname = 'job_deltas'") <=
             vacuums) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "no fold, or no vacuum";
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(Query("SELECT n FROM job_counts WHERE tube = 't' AND state = 0"), 5);
}

// A fold that fails (here its function raises, after counting the try in a
// sequence, which no rollback takes back) changes no count: the deltas
// wait for the next fold, the counts read both tables, and the store goes
// on writing and reading. Once folds succeed again they fold everything.
TEST_F(PgStoreTest, AFailingFoldLeavesTheCountsTrueAndTheStoreServing) {
  auto s =
      PgStore::Open({.conninfo = db_.uri(), .shards = 16, .fold_counts_ms = 20}, inbox_.executor());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_TRUE(db_.Exec(
      "CREATE SEQUENCE fold_tries; ALTER FUNCTION delayd_fold_counts() RENAME TO fold_counts_ok; "
      "CREATE FUNCTION delayd_fold_counts() RETURNS boolean LANGUAGE plpgsql AS $f$ BEGIN "
      "PERFORM nextval('fold_tries'); RAISE EXCEPTION 'the fold is broken'; END $f$"))
      << db_.error();
  auto wait_for = [&](const std::string& sql, int64_t at_least, const char* what) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (Query(sql) < at_least) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << what;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  };
  for (uint64_t id = 1; id <= 4; ++id) ASSERT_TRUE(Apply(**s, Mutation::Insert(Job(id))).ok());
  const int64_t tries = Query("SELECT last_value FROM fold_tries");
  wait_for("SELECT last_value FROM fold_tries", tries + 3, "no fold was tried");
  ASSERT_TRUE(Apply(**s, Mutation::Delete(4)).ok());
  auto counts = (*s)->CountJobs("t");
  ASSERT_TRUE(counts.ok()) << counts.status().ToString();
  ASSERT_EQ(counts->size(), 1u);
  EXPECT_EQ((*counts)[0].ready, 3u);
  EXPECT_GT(Query("SELECT count(*) FROM job_deltas WHERE state <> -1"), 0) << "nothing was folded";
  // The fold works again: everything waiting is folded, the sums unchanged.
  ASSERT_TRUE(
      db_.Exec("DROP FUNCTION delayd_fold_counts(); ALTER FUNCTION fold_counts_ok() "
               "RENAME TO delayd_fold_counts"))
      << db_.error();
  wait_for("SELECT -count(*) FROM job_deltas WHERE state <> -1", 0, "the deltas were not folded");
  EXPECT_EQ(Query("SELECT n FROM job_counts WHERE tube = 't' AND state = 0"), 3);
}

// job_deltas is unlogged: a crash of the server empties it, and the deltas
// not folded yet are gone. The mark goes with them, so the next fold
// counts the jobs again, while a writer keeps changing them, and the counts
// equal the table's.
TEST_F(PgStoreTest, DeltasLostWithAnUnloggedTableAreCountedAgain) {
  auto s = PgStore::Open({.conninfo = db_.uri(), .shards = 16, .fold_counts_ms = 3'600'000},
                         inbox_.executor());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(Query("SELECT count(*) FROM pg_class WHERE relname = 'job_deltas' AND "
                  "relpersistence = 'u'"),
            1);
  for (uint64_t id = 1; id <= 6; ++id) ASSERT_TRUE(Apply(**s, Mutation::Insert(Job(id))).ok());
  ASSERT_EQ(Query("SELECT delayd_fold_counts()::int::int8"), 1);
  for (uint64_t id = 7; id <= 9; ++id) ASSERT_TRUE(Apply(**s, Mutation::Insert(Job(id))).ok());
  ASSERT_TRUE(Apply(**s, Mutation::Delete(2)).ok());
  // What a crash leaves: the folded counts, and no delta.
  ASSERT_TRUE(db_.Exec("DELETE FROM job_deltas")) << db_.error();
  auto lost = (*s)->CountJobs("t");
  ASSERT_TRUE(lost.ok()) << lost.status().ToString();
  ASSERT_EQ(lost->size(), 1u);
  ASSERT_EQ((*lost)[0].ready, 6u) << "the deltas since the fold are gone";
  std::atomic<bool> writing{true};
  std::thread writer([&] {
    for (uint64_t id = 100; writing && id < 100'000; ++id) {
      ASSERT_TRUE(Apply(**s, Mutation::Insert(Job(id))).ok());
    }
  });
  ASSERT_EQ(Query("SELECT delayd_fold_counts()::int::int8"), 1);
  EXPECT_EQ(Query("SELECT count(*) FROM job_deltas WHERE state = -1"), 1) << "the mark is back";
  writing = false;
  writer.join();
  ASSERT_EQ(Query("SELECT delayd_fold_counts()::int::int8"), 1);
  auto counts = (*s)->CountJobs("t");
  ASSERT_TRUE(counts.ok()) << counts.status().ToString();
  ASSERT_EQ(counts->size(), 1u);
  ExpectTheTableCounts((*counts)[0]);
  EXPECT_GT((*counts)[0].ready, 8u);
}

TEST_F(PgStoreTest, EachJobCarriesItsShardFromItsIdOrItsKey) {
  auto s = Open(16);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_TRUE(Apply(**s, Mutation::Insert(Job(37))).ok());
  ASSERT_TRUE(Apply(**s, Mutation::Insert(Job(38, "order-1"))).ok());
  EXPECT_EQ(Query("SELECT shard FROM jobs WHERE id=37"), 37 % 16);
  EXPECT_EQ(Query("SELECT shard FROM jobs WHERE id=38"), pg::JobShard(38, "t", "order-1", 16));
  // The same key under another id lands on the same shard, so the unique
  // index refuses it.
  EXPECT_EQ(pg::JobShard(39, "t", "order-1", 16), pg::JobShard(38, "t", "order-1", 16));
  EXPECT_EQ(Apply(**s, Mutation::Insert(Job(39, "order-1"))).code(), StatusCode::kConflict);
  EXPECT_EQ((*s)->GetByKey("t", "order-1")->value().id, 38u);
}

TEST_F(PgStoreTest, BytesThatAreNotTextComeBackByteForByte) {
  auto s = Open();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  JobRecord j = Job(1, std::string("k\xff\x00z", 4));
  j.body = std::string("\x00\x01\xfe\xff\r\n", 6);
  j.last_error = std::string("bad \xc3\x28 utf-8", 12);
  j.spec = "{}";
  ASSERT_TRUE(Apply(**s, Mutation::Insert(j)).ok());
  auto got = (*s)->Get(1);
  ASSERT_TRUE(got.ok() && got->has_value()) << got.status().ToString();
  EXPECT_EQ((*got)->body, j.body);
  EXPECT_EQ((*got)->key, j.key);
  EXPECT_EQ((*got)->last_error, j.last_error);
  EXPECT_EQ((*s)->GetByKey("t", j.key)->value().id, 1u);
}

// A batch's inserts travel as one statement per up to 1024 rows, each
// column an array: every field of every row must arrive as it was, NULLs
// (an empty key) and bytes that are not text among them.
TEST_F(PgStoreTest, ABatchOfManyInsertsArrivesWholeFieldForField) {
  auto s = Open(16);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  std::vector<JobRecord> jobs;
  std::vector<Mutation> ms;
  for (uint64_t id = 1; id <= 2500; ++id) {
    JobRecord j = Job(id, id % 3 == 0 ? "key-" + std::to_string(id) : "");
    j.tube = id % 2 ? "odd" : "even";
    j.priority = static_cast<uint32_t>(id * 7);
    j.state = id % 5 == 0 ? StoredState::kDone : StoredState::kDelayed;
    j.due_ms = 1'700'000'000'000 + static_cast<int64_t>(id) * 61'000;
    j.delay_ms = static_cast<int64_t>(id);
    j.ttr_ms = 1000 + static_cast<int64_t>(id);
    j.created_ms = 1'690'000'000'000 + static_cast<int64_t>(id);
    j.done_ms = j.state == StoredState::kDone ? j.created_ms + 5 : 0;
    j.run_at_ms = j.due_ms - 1;
    j.counters = {.reserves = 1, .timeouts = 2, .releases = 3, .buries = 4, .kicks = 5};
    j.spec = id % 4 ? "" : "{\"target\":\"x\"}";
    j.attempt_log = id % 7 ? "" : "[]";
    j.last_error = id % 11 ? "" : std::string("e\x00rr", 4);
    j.body = id % 13 ? std::string(id % 50, static_cast<char>(id)) : "";
    jobs.push_back(j);
    ms.push_back(Mutation::Insert(std::move(j)));
  }
  std::atomic<int> done{0};
  Status result;
  (*s)->SubmitAll(std::move(ms), [&](const Status& st) {
    result = st;
    ++done;
  });
  inbox_.RunUntil(done, 1);
  ASSERT_TRUE(result.ok()) << result.ToString();
  EXPECT_EQ(Query("SELECT count(*) FROM jobs"), 2500);
  EXPECT_EQ(Query("SELECT count(*) FROM jobs WHERE key IS NULL"), 2500 - 2500 / 3);
  EXPECT_EQ(Query("SELECT count(*) FROM jobs WHERE done_ms IS NULL"), 2500 - 2500 / 5);
  for (const JobRecord& want : jobs) {
    auto got = (*s)->Get(want.id);
    ASSERT_TRUE(got.ok() && got->has_value()) << want.id;
    const JobRecord& j = **got;
    EXPECT_EQ(std::tie(j.tube, j.priority, j.state, j.due_ms, j.delay_ms, j.ttr_ms, j.created_ms,
                       j.done_ms, j.run_at_ms, j.key, j.spec, j.attempt_log, j.last_error, j.body),
              std::tie(want.tube, want.priority, want.state, want.due_ms, want.delay_ms,
                       want.ttr_ms, want.created_ms, want.done_ms, want.run_at_ms, want.key,
                       want.spec, want.attempt_log, want.last_error, want.body))
        << "job " << want.id;
    EXPECT_EQ(j.counters.kicks, 5u);
    EXPECT_EQ(j.counters.reserves, 1u);
  }
}

TEST_F(PgStoreTest, ADatabaseOfANewerSchemaVersionIsAClearStartUpError) {
  ASSERT_TRUE(Open().ok());
  ASSERT_TRUE(db_.Exec("INSERT INTO delayd_schema (version) VALUES (" +
                       std::to_string(pg::SchemaVersion() + 1) + ")"))
      << db_.error();
  auto s = Open();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("newer than this delayd"), std::string::npos)
      << s.status().ToString();
}

TEST_F(PgStoreTest, ABadConnectionStringOrAnUnreachableServerIsAClearError) {
  auto bad = PgStore::Open({.conninfo = "postgres://user@host:notaport/db?nosuchoption=1"},
                           inbox_.executor());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("bad connection string"), std::string::npos)
      << bad.status().ToString();
  // Port 1 on loopback: nothing listens there.
  auto down = PgStore::Open({.conninfo = "postgresql://delayd@127.0.0.1:1/x?connect_timeout=5"},
                            inbox_.executor());
  ASSERT_FALSE(down.ok());
  EXPECT_NE(down.status().message().find("cannot connect"), std::string::npos)
      << down.status().ToString();
}

// A server that accepts the connection and then says nothing (a hung host,
// a black-holed network) must not hold delayd forever: libpq's own default
// is to wait without end, delayd's is 5 s (PgConn::Connect).
TEST_F(PgStoreTest, AServerThatNeverAnswersIsGivenUpOnByDefault) {
  delayd::testing::LoopbackSocket silent;
  ASSERT_NE(silent.port(), 0);
  ASSERT_TRUE(silent.Listen());
  const auto start = std::chrono::steady_clock::now();
  auto s = PgStore::Open(
      {.conninfo = "postgresql://delayd@127.0.0.1:" + std::to_string(silent.port()) + "/x"},
      inbox_.executor());
  const auto waited = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("timeout"), std::string::npos) << s.status().ToString();
  EXPECT_LT(waited, std::chrono::seconds(30));
}

// The engine's reads go aside: ReadAside returns at once, the read is made
// on the store's read thread (where its synchronous reads work too), and the
// answer comes through the executor.
TEST_F(PgStoreTest, AReadAsideIsMadeOnTheReadThreadAndAnsweredThroughTheExecutor) {
  auto s = Open();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_TRUE(Apply(**s, Mutation::Insert(Job(1))).ok());
  std::atomic<bool> go{false};
  std::atomic<int> done{0};
  std::thread::id read_on;
  Result<std::optional<JobRecord>> got = Status::Internal("not read");
  (*s)->ReadAside(
      [&] {
        while (!go) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        read_on = std::this_thread::get_id();
        got = (*s)->Get(1);
      },
      [&] { ++done; });
  EXPECT_EQ(done.load(), 0) << "ReadAside waited for its read";
  go = true;
  inbox_.RunUntil(done, 1);
  EXPECT_NE(read_on, std::this_thread::get_id());
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((*got)->body, "b");
  auto direct = (*s)->Get(1);  // from this thread: queued to the read thread, waited for
  ASSERT_TRUE(direct.ok() && direct->has_value());
}

TEST_F(PgStoreTest, ALostConnectionFailsWritesAsRetryableAndIsRestoredByItself) {
  auto s = Open();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_TRUE(Apply(**s, Mutation::Insert(Job(1))).ok());
  // The server ends every session of the store (as a restart would).
  ASSERT_TRUE(
      db_.Exec("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
               "datname = current_database() AND pid <> pg_backend_pid()"))
      << db_.error();
  Status first = Apply(**s, Mutation::Insert(Job(2)));
  if (!first.ok()) {
    EXPECT_EQ(first.code(), StatusCode::kIoError) << first.ToString();
  }
  // Within the backoff the store connects again; later writes succeed.
  Status later;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  uint64_t id = 3;
  do {
    later = Apply(**s, Mutation::Insert(Job(id++)));
    if (!later.ok()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } while (!later.ok() && std::chrono::steady_clock::now() < deadline);
  EXPECT_TRUE(later.ok()) << later.ToString();
  EXPECT_EQ(Query("SELECT count(*) FROM jobs WHERE id=1"), 1);
  // Reads reconnect too.
  auto got = (*s)->Get(1);
  for (int i = 0; i < 100 && !got.ok(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    got = (*s)->Get(1);
  }
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(got->has_value());
}

// PgStore::Sync vouches only for commits made on the writer connection it
// has seen since the last good sync: after the server lost the writer's
// connection, what the old connection committed may be gone (a crash loses
// unflushed asynchronous commits), and a sync on the new one cannot tell.
// So the store looks (Settle): each write in doubt is answered as the
// server has it. Here the writer's session is ended under it: a batch sent
// on the dead connection is not kept and is reported as failed (unless the
// writer saw the connection closed first, and sent it on a new one); a
// batch on the new connection is kept, and acknowledged once the look has
// made it durable. Every answer agrees with the table, and writes go on.
TEST_F(PgStoreTest, AWriteInDoubtIsAnsweredAsTheServerHasIt) {
  auto s = Open();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_TRUE(Apply(**s, Mutation::Insert(Job(1))).ok());
  EXPECT_EQ(Query("SELECT count(*) FROM pg_stat_activity WHERE application_name='delayd-writer' "
                  "AND datname=current_database()"),
            1);
  ASSERT_TRUE(
      db_.Exec("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
               "application_name='delayd-writer' AND datname=current_database()"))
      << db_.error();
  // Until two writes in a row are acknowledged (10 s at most).
  int acknowledged = 0;
  uint64_t id = 2;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (acknowledged < 2 && std::chrono::steady_clock::now() < deadline) {
    const Status st = Apply(**s, Mutation::Insert(Job(id)));
    const int64_t kept = Query("SELECT count(*) FROM jobs WHERE id=" + std::to_string(id));
    if (st.ok()) {
      EXPECT_EQ(kept, 1) << "job " << id << " was acknowledged but is not kept";
      ++acknowledged;
    } else {
      EXPECT_EQ(st.code(), StatusCode::kIoError) << "job " << id << ": " << st.ToString();
      EXPECT_EQ(kept, 0) << "job " << id << " was answered " << st.ToString() << " but is kept";
      acknowledged = 0;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ++id;
  }
  EXPECT_EQ(acknowledged, 2) << "writes did not go on after the writer's session ended";
}

// A crash of the server ends every session, and may take asynchronous
// commits that were not flushed yet; so a sync vouches for the writer's
// commits only while the writer's session is still on the server it
// reached (PgStore::Sync). Here the session ends between a batch's commit
// and its sync (the sync waits on a row the test holds): the sync does not
// vouch, and the put is answered as the server has it (kept).
TEST_F(PgStoreTest, ASyncVouchesOnlyWhileTheWritersSessionIsOnTheServer) {
  auto s = Open();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_TRUE(Apply(**s, Mutation::Insert(Job(1))).ok());
  EXPECT_FALSE((*s)->stats().failing);
  PGconn* holder = PQconnectdb(db_.uri().c_str());
  auto exec = [&](const char* sql) {
    PGresult* r = PQexec(holder, sql);
    const bool ok = PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK;
    PQclear(r);
    return ok;
  };
  ASSERT_TRUE(exec("BEGIN"));
  ASSERT_TRUE(exec("SELECT value FROM meta WHERE key='syncs' FOR UPDATE"));
  auto wait_for = [&](const std::string& count_sql, int64_t want) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (Query(count_sql) != want) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return true;
  };
  bool syncer_waited = false;
  bool writer_gone = false;
  std::thread crash([&] {
    syncer_waited = wait_for(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name='delayd-syncer' AND "
        "wait_event_type='Lock' AND datname=current_database()",
        1);
    Query(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE "
        "application_name='delayd-writer' AND datname=current_database()");
    writer_gone = wait_for(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name='delayd-writer' AND "
        "datname=current_database()",
        0);
    exec("COMMIT");
  });
  const Status put = Apply(**s, Mutation::Insert(Job(2)));
  crash.join();
  PQfinish(holder);
  ASSERT_TRUE(syncer_waited);
  ASSERT_TRUE(writer_gone);
  EXPECT_TRUE((*s)->stats().failing) << "the sync vouched for a session the server no longer has";
  EXPECT_TRUE(put.ok()) << put.ToString();
  EXPECT_EQ(Query("SELECT count(*) FROM jobs WHERE id=2"), 1);
  // The writer learns at its next batch that its session is gone (that batch
  // fails, as in AWriteInDoubtIsAnsweredAsTheServerHasIt); on its new
  // connection it is vouched for again, after the first batch there.
  Status later;
  uint64_t id = 3;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  do {
    later = Apply(**s, Mutation::Insert(Job(id++)));
  } while ((!later.ok() || (*s)->stats().failing) && std::chrono::steady_clock::now() < deadline);
  EXPECT_TRUE(later.ok()) << later.ToString();
  EXPECT_FALSE((*s)->stats().failing);
}

// One owner per database: a second single node, and a cluster node, are
// refused while a single node holds it; cluster nodes share it, and keep a
// single node out.
TEST_F(PgStoreTest, ADatabaseHasOneOwnerOrOneCluster) {
  auto single = PgStore::Open({.conninfo = db_.uri(), .owner_name = "first"}, inbox_.executor());
  ASSERT_TRUE(single.ok()) << single.status().ToString();
  auto second = PgStore::Open({.conninfo = db_.uri(), .owner_name = "second"}, inbox_.executor());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kConflict);
  const std::string why = second.status().message();
  EXPECT_NE(why.find("delayd single first"), std::string::npos) << why;
  EXPECT_NE(why.find("since 20"), std::string::npos) << why;
  EXPECT_NE(why.find("--cluster"), std::string::npos) << why;
  auto node = PgStore::Open({.conninfo = db_.uri(), .node_id = "n1", .owner_name = "n1"},
                            inbox_.executor());
  ASSERT_FALSE(node.ok());
  EXPECT_NE(node.status().message().find("a single node"), std::string::npos)
      << node.status().ToString();
  single->reset();  // the holder leaves: its lock goes with its session
  auto n1 = PgStore::Open({.conninfo = db_.uri(), .node_id = "n1", .owner_name = "n1"},
                          inbox_.executor());
  ASSERT_TRUE(n1.ok()) << n1.status().ToString();
  auto n2 = PgStore::Open({.conninfo = db_.uri(), .node_id = "n2", .owner_name = "n2"},
                          inbox_.executor());
  ASSERT_TRUE(n2.ok()) << n2.status().ToString();
  auto late = PgStore::Open({.conninfo = db_.uri(), .owner_name = "late"}, inbox_.executor());
  ASSERT_FALSE(late.ok());
  EXPECT_NE(late.status().message().find("delayd cluster n"), std::string::npos)
      << late.status().ToString();
}

// The writer and the claimer never plan a statement for its parameters
// (pg::kGenericPlans), so each statement's one generic plan must find
// jobs through an index: on a table of 20,000 jobs in every state, no
// statement's generic plan scans the whole table or walks a whole index.
// (A purge by `id IN (SELECT ...)` was a hash join over such a scan.)
TEST_F(PgStoreTest, NoStatementsGenericPlanScansTheJobsTable) {
  auto store = Open(16);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  ASSERT_TRUE(Apply(**store, Mutation::Insert(Job(1))).ok());
  ASSERT_TRUE(db_.Exec(std::string(kManyJobs) + "; ANALYZE")) << db_.error();
  GenericPlanSession session(db_.uri());
  ASSERT_EQ(session.Prepare(), "");
  size_t explained = 0;
  for (const pg::Statement& st : pg::Statements()) {
    session.ExpectBounded(st);
    ++explained;
  }
  EXPECT_GT(explained, 30u);
}

// A generic plan is made at a statement's first use and kept until the
// table's statistics change: one made when the writer or the claimer
// connected to an empty table (a new cluster, a drained queue after a
// VACUUM) must not walk the table once it holds a backlog. (A claim
// planned so read every job, 3.3 ms a claim on 20,000, until autovacuum
// analyzed the table.) The statements of a job's life are bounded
// whatever the statistics say (pg::kGenericPlans); the others once the
// store has analyzed the grown table (PgStore::KeepStatistics), which
// makes every session plan them again.
TEST_F(PgStoreTest, PlansMadeOnAnEmptyTableFindJobsByIndexOnceItHoldsABacklog) {
  auto store = PgStore::Open(
      {.conninfo = db_.uri(), .shards = 16, .fold_counts_ms = 20, .analyze_from_rows = 1000},
      inbox_.executor());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  ASSERT_TRUE(db_.Exec("ALTER TABLE jobs SET (autovacuum_enabled = off)")) << db_.error();
  ASSERT_TRUE(db_.Exec("VACUUM jobs")) << db_.error();
  GenericPlanSession session(db_.uri());
  ASSERT_EQ(session.Prepare(), "");
  for (const pg::Statement& st : pg::Statements()) session.Explain(st);  // planned on it empty
  ASSERT_TRUE(Apply(**store, Mutation::Insert(Job(1))).ok());
  ASSERT_TRUE(db_.Exec(kManyJobs)) << db_.error();
  // Before any statistics of the backlog: what every job goes through.
  for (const pg::Statement& st : pg::Statements()) {
    const std::string_view name = st.name;
    if (name == "insert" || name == "update" || name == "delete" || name == "promote" ||
        name == "claim" || name == "claim_push") {
      session.ExpectBounded(st);
    }
  }
  // The store analyzes the table (autovacuum is off for it).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (Query("SELECT reltuples::int8 FROM pg_class WHERE oid = 'jobs'::regclass") < 10'000 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (const pg::Statement& st : pg::Statements()) session.ExpectBounded(st);
}

// The store analyzes the grown jobs table only through a user who may:
// for anyone else ANALYZE is a warning that changes nothing, and the store
// would try it again at every tick.
TEST_F(PgStoreTest, OnlyAUserWhoMayAnalyzeJobsIsToldItGrew) {
  // A store that does not analyze by itself within the test.
  auto store = PgStore::Open({.conninfo = db_.uri(), .shards = 16, .fold_counts_ms = 3'600'000},
                             inbox_.executor());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  ASSERT_TRUE(Apply(**store, Mutation::Insert(Job(1))).ok());
  ASSERT_TRUE(
      db_.Exec("ALTER TABLE jobs SET (autovacuum_enabled = off); INSERT INTO jobs SELECT "
               "(jsonb_populate_record(j, jsonb_build_object('id', j.id + g))).* FROM jobs j, "
               "generate_series(1, 3000) g"))
      << db_.error();
  const std::string role = "no_owner_" + std::to_string(::getpid());
  ASSERT_TRUE(
      db_.Exec(fmt::format("DROP ROLE IF EXISTS {0}; CREATE ROLE {0} LOGIN; GRANT SELECT "
                           "ON ALL TABLES IN SCHEMA public TO {0}",
                           role)))
      << db_.error();
  // How many rows the statement reports after the table's statistics
  // were taken on an empty table, and its rows are counted.
  auto grown = [&](const std::string& uri) -> int {
    PGconn* c = PQconnectdb(uri.c_str());
    int rows = -1;
    for (const pg::Statement& st : pg::Statements()) {
      if (std::string_view(st.name) != "jobs_grown") continue;
      PGresult* r = PQexecParams(c, st.sql.c_str(), 1, st.types.data(),
                                 std::array<const char*, 1>{"1000"}.data(), nullptr, nullptr, 0);
      if (PQresultStatus(r) == PGRES_TUPLES_OK) rows = PQntuples(r);
      PQclear(r);
    }
    PQfinish(c);
    return rows;
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (grown(db_.uri()) != 1 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the server's counts
  }
  EXPECT_EQ(grown(db_.uri()), 1);
  std::string other = db_.uri();
  other.replace(other.find("://") + 3, other.find('@') - other.find("://") - 3, role);
  EXPECT_EQ(grown(other), 0);
  // A role is the cluster's, not the database's.
  ASSERT_TRUE(db_.Exec(fmt::format("DROP OWNED BY {0}; DROP ROLE {0}", role))) << db_.error();
}

// Statistics taken while no job was delayed (an idle hour, a drained
// backlog) say that no row has state 1, so a plan that scans every
// delayed job looks one row long. A promotion must still find its jobs
// by their primary key, whatever the statistics say, when a burst of
// delayed jobs has come since: a scan of jobs_due would read all of them
// at every tick.
TEST_F(PgStoreTest, APromotionFindsItsJobsByKeyWhateverTheStatisticsSay) {
  auto store = Open(16);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  ASSERT_TRUE(Apply(**store, Mutation::Insert(Job(1))).ok());
  auto many = [&](int state, int64_t from) {
    return db_.Exec(fmt::format(
        "INSERT INTO jobs SELECT (jsonb_populate_record(j, jsonb_build_object('id', {1} + g, "
        "'shard', g % 16, 'state', {0}, 'due_ms', g, 'due_min', g / 600))).* FROM jobs j, "
        "generate_series(1, 20000) g WHERE j.id = 1",
        state, from));
  };
  ASSERT_TRUE(db_.Exec("ALTER TABLE jobs SET (autovacuum_enabled = off)")) << db_.error();
  ASSERT_TRUE(many(0, 100'000)) << db_.error();
  ASSERT_TRUE(db_.Exec("ANALYZE jobs")) << db_.error();
  ASSERT_TRUE(many(1, 200'000)) << db_.error();
  for (const char* mode : {"force_generic_plan", "force_custom_plan"}) {
    PGconn* c = PQconnectdb(db_.uri().c_str());
    ASSERT_EQ(PQstatus(c), CONNECTION_OK) << PQerrorMessage(c);
    PQclear(PQexec(c, (std::string("SET plan_cache_mode = ") + mode).c_str()));
    for (const pg::Statement& st : pg::Statements()) {
      if (std::string_view(st.name) != "promote") continue;
      PGresult* p =
          PQprepare(c, st.name, st.sql.c_str(), static_cast<int>(st.types.size()), st.types.data());
      ASSERT_EQ(PQresultStatus(p), PGRES_COMMAND_OK) << PQerrorMessage(c);
      PQclear(p);
    }
    // Three of the delayed jobs, due; shards as "many" gave them.
    PGresult* r = PQexec(c,
                         "EXPLAIN EXECUTE promote('{0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15}', "
                         "'x', '{0}', '{1,2,3}', '{200001,200002,200003}', 999999, '{}', '{}')");
    ASSERT_EQ(PQresultStatus(r), PGRES_TUPLES_OK) << PQerrorMessage(c);
    std::string plan;
    for (int i = 0; i < PQntuples(r); ++i) plan += std::string(PQgetvalue(r, i, 0)) + "\n";
    PQclear(r);
    PQfinish(c);
    EXPECT_EQ(plan.find("jobs_due"), std::string::npos) << mode << ":\n" << plan;
    EXPECT_EQ(plan.find("Seq Scan on jobs"), std::string::npos) << mode << ":\n" << plan;
    EXPECT_NE(plan.find("jobs_pkey"), std::string::npos) << mode << ":\n" << plan;
  }
}

}  // namespace
}  // namespace delayd::store
