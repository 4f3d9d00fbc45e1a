// Checkpointer: copies the SQLite store's write-ahead log into the database
// on a thread and connection of its own, beside the writer.
//
// A checkpoint copies each page of the log into the database once, however
// often it changed since the last one. The due-minute index rewrites the same
// few pages in every batch, so checkpointing every 10,000 pages (about 40 MiB
// of log) rather than SQLite's 1,000 cut the writer's work: 135k -> 155-189k
// puts/s with delays spread over an hour (bench/run's put phase, this 2-core
// machine). Made by the writer after its commit, as SQLite does by default, a
// checkpoint stopped every commit for its copy and two syncs: up to 274 ms on
// this disk, which made the jobs due meanwhile that late (bench/durability).
//
// So a thread of its own checkpoints, beside the writer. The log restarts
// from its beginning only once a checkpoint has copied all of it, and the
// writer keeps adding to it meanwhile; so after each of the checkpointer's
// passes the writer copies the little that is left itself, at its next
// commit, and the log restarts at the commit after. Should the checkpointer
// fall kWriterPages behind, the writer copies it all, and says so.
//
// Threading: Hook runs on the writer's thread (SQLite calls it after each
// commit); the checkpointer's own thread runs from Start to Stop.
#pragma once

#include <sqlite3.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/status.h"

namespace delayd::store::sqlite {

class Checkpointer {
 public:
  // Opens a connection of its own to the database at `path` and starts the
  // thread.
  static Result<std::unique_ptr<Checkpointer>> Start(const std::string& path);
  // Stops the thread and closes the connection.
  ~Checkpointer();
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // The writer's commit hook (sqlite3_wal_hook, with the checkpointer as
  // its argument): `pages` is the log's size after the commit.
  static int Hook(void* self, sqlite3* db, const char* name, int pages);
  // Ends the thread; later hooks still let the writer copy what is left.
  void Stop();

 private:
  static constexpr int kPages = 10'000;
  static constexpr int kWriterPages = 4 * kPages;
  static constexpr int kNice = 19;  // the lowest CPU priority
  static constexpr int kCacheKib = 2048;

  Checkpointer() = default;
  void Loop();

  sqlite3* db_ = nullptr;  // the thread's only
  std::mutex mu_;
  std::condition_variable cv_;
  bool wanted_ = false;    // guarded by mu_
  bool stopping_ = false;  // guarded by mu_
  // Set by the thread when the writer should copy what its pass left.
  std::atomic<bool> finish_{false};
  int requested_at_ = 0;  // writer: log pages when it last asked for a checkpoint
  int copied_at_ = 0;     // writer: log pages all copied by then
  std::thread thread_;
};

}  // namespace delayd::store::sqlite
