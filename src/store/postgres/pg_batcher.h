// Batcher: the statements of one batch of PgStore's writer, sent as a
// pipeline (pg_store.h). Results are read at each Flush (and every
// kPipelineDepth statements), in order. Consecutive inserts become one
// statement of up to kInsertRows rows, and consecutive deletes one of as
// many: every statement that changes jobs also runs the job_counts trigger
// (pg_schema.cc), so fewer and larger ones cost the server less.
//
// Threading: the writer's thread only, as its connection.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <unordered_set>
#include <vector>

#include "common/status.h"
#include "store/job_record.h"
#include "store/postgres/pg_conn.h"
#include "store/postgres/pg_rows.h"

namespace delayd::store::pg {

class Batcher {
 public:
  // Rows per "insert" (and "delete") statement at most.
  static constexpr size_t kInsertRows = 1024;
  // Statements a pipeline holds before the writer reads their results, so
  // that neither side blocks on a full socket buffer.
  static constexpr size_t kPipelineDepth = 512;

  explicit Batcher(PgConn& conn) : conn_(conn) {}

  // Queues a job row to insert.
  void Insert(const JobRecord& j, int shard);
  // What a statement's rows are handed to, when it succeeds.
  using Rows = std::function<void(const PGresult*)>;
  // Queues the delete of job `id`, only on its `version` when given. A
  // guarded delete that finds no such row is refused into `*own` (as Send
  // does), so the rest commit; with `own` null it fails the batch, and goes
  // in a statement of its own so that its rows say which.
  void Delete(uint64_t id, std::optional<uint64_t> version, const char* if_none, Status* own);
  // Queues a statement. With `if_none`, changing (or returning) no row is a
  // `refused` status saying `if_none`: the submission's own failure when
  // `own` is given (the statement changed nothing, so the rest may commit),
  // else the batch's. The rows it returns go to `rows`.
  void Send(const char* name, const Params& p, const char* if_none = nullptr, Status* own = nullptr,
            StatusCode refused = StatusCode::kConflict, Rows rows = nullptr);
  // Queues SQL without parameters (BEGIN, COMMIT, savepoints).
  void Sql(const char* sql);
  // Whether a statement sent since the last Flush may fail the batch by
  // changing no row: its result must be read before the transaction commits.
  bool checks_pending() const;
  // Reads every result sent: the first failure since the last Flush.
  Status Flush();

 private:
  struct Sent {
    const char* if_none;  // Send's
    Status* own;
    StatusCode refused;
    Rows rows;
  };

  // Deletes queued for one statement, and whom each one's refusal goes to.
  class Deletes {
   public:
    // Written out: clang does not construct a nested class by its member
    // initializers before the enclosing class is complete.
    Deletes() : ids_(kInt8), versions_(kInt8) {}
    void Add(uint64_t id, std::optional<uint64_t> version, const char* if_none, Status* own);
    bool Has(uint64_t id) const { return seen_.count(id) != 0; }
    size_t size() const { return entries_.size(); }
    Params ToParams() const;
    // The statement's rows are the ids it deleted: a guarded delete whose id
    // is not among them is refused.
    Rows Refusals() const;

   private:
    struct Entry {
      int64_t id;
      const char* if_none;  // guarded: the refusal's message
      Status* own;
    };
    ArrayParam ids_;
    ArrayParam versions_;
    std::vector<Entry> entries_;
    std::unordered_set<uint64_t> seen_;
  };

  void SendInserts();
  void SendDeletes();
  void Track(Status s, Sent sent);
  Status ReadSync();

  PgConn& conn_;
  std::optional<Columns> inserts_;  // rows not sent yet
  std::optional<Deletes> deletes_;  // deletes not sent yet
  std::vector<Sent> sent_;
  Status status_;
};

}  // namespace delayd::store::pg
