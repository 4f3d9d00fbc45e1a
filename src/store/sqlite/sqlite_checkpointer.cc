#include "store/sqlite/sqlite_checkpointer.h"

#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>

#include "common/thread_name.h"
#include "store/sqlite/sqlite_db.h"

namespace delayd::store::sqlite {

Result<std::unique_ptr<Checkpointer>> Checkpointer::Start(const std::string& path) {
  std::unique_ptr<Checkpointer> c(new Checkpointer());
  if (Status s = OpenDb(path, kCacheKib, &c->db_); !s.ok()) return s;
  c->thread_ = StartNamedThread("sqlite-ckpt", [p = c.get()] { p->Loop(); });
  return c;
}

Checkpointer::~Checkpointer() {
  Stop();
  sqlite3_close(db_);
}

void Checkpointer::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

int Checkpointer::Hook(void* self, sqlite3* db, const char* name, int pages) {
  auto* c = static_cast<Checkpointer*>(self);
  // `pages` counts the whole log, copied or not; these marks say which part
  // is new. A smaller count means the log restarted from its beginning.
  int& requested = c->requested_at_;
  int& copied = c->copied_at_;
  if (pages < requested) requested = 0;
  if (pages < copied) copied = 0;
  if (c->finish_.exchange(false)) {
    if (sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, nullptr, nullptr) ==
        SQLITE_BUSY) {
      c->finish_ = true;  // the checkpointer is at it again: next commit
    } else {
      copied = requested = pages;
    }
  } else if (pages - copied >= kWriterPages) {
    const auto start = std::chrono::steady_clock::now();
    sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, nullptr, nullptr);
    spdlog::warn("store: the checkpointer fell {} pages behind; the writer checkpointed in {} ms",
                 pages - copied,
                 std::chrono::duration_cast<std::chrono::milliseconds>(
                     std::chrono::steady_clock::now() - start)
                     .count());
    copied = requested = pages;
  } else if (pages - requested >= kPages) {
    {
      std::lock_guard lock(c->mu_);
      c->wanted_ = true;
    }
    c->cv_.notify_one();
    requested = pages;
  }
  return SQLITE_OK;
}

void Checkpointer::Loop() {
  // Copying pages is the most CPU this store spends at once (up to 10 ms a
  // pass). At the process's priority it held the event loop off a core for
  // 2-5 ms at a time, and jobs due then came that late (perf sched showed
  // the loop runnable, waiting behind this thread); at the lowest priority
  // the loop takes the core back at once. Starved on a saturated machine, it
  // falls behind and the writer checkpoints instead (Hook).
  if (setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), kNice) != 0) {
    spdlog::warn("store: cannot lower the checkpointer thread's priority");
  }
  for (;;) {
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return wanted_ || stopping_; });
      if (stopping_) return;
      wanted_ = false;
    }
    int rc = sqlite3_wal_checkpoint_v2(db_, "main", SQLITE_CHECKPOINT_PASSIVE, nullptr, nullptr);
    if (rc == SQLITE_OK) {
      // SQLite syncs the database file only when a checkpoint copies the
      // whole log, which only the writer's finishing pass does: it would
      // sync everything this pass copied (up to 40 MiB) while every commit
      // waits (2-5 ms a time, every second under 10k deletes/s; the due jobs
      // of those milliseconds came that late). Synced here, beside the
      // writer, that pass has only its own few pages left to sync.
      sqlite3_file* db_file = nullptr;
      if (sqlite3_file_control(db_, "main", SQLITE_FCNTL_FILE_POINTER, &db_file) == SQLITE_OK &&
          db_file != nullptr && db_file->pMethods != nullptr) {
        if (int sync_rc = db_file->pMethods->xSync(db_file, SQLITE_SYNC_NORMAL);
            sync_rc != SQLITE_OK) {
          // The writer's pass syncs it all then, as SQLite does by itself.
          spdlog::warn("store: checkpoint: sync of the database file: {}", sqlite3_errstr(sync_rc));
        }
      }
      finish_ = true;  // whatever the writer added meanwhile
    } else if (rc != SQLITE_BUSY) {
      spdlog::warn("store: checkpoint: {}", sqlite3_errmsg(db_));
    }
  }
}

}  // namespace delayd::store::sqlite
