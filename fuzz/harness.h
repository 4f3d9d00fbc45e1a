// A fresh delayd core per fuzz input: an SQLite store in a private
// directory under /dev/shm (or $TMPDIR), the engine on a manual clock, and the
// event loop that completions run on. Time does not pass unless a target
// moves the clock, so a run depends on its input alone.
#pragma once

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "common/clock.h"
#include "engine/engine.h"
#include "store/sqlite/sqlite_store.h"
#include "store/testing/flaky_store.h"

namespace delayd::fuzz {

inline std::filesystem::path ScratchDir() {
  static const std::filesystem::path dir = [] {
    std::filesystem::path base =
        std::filesystem::exists("/dev/shm") ? "/dev/shm" : std::filesystem::temp_directory_path();
    return base / ("delayd-fuzz-" + std::to_string(::getpid()));
  }();
  return dir;
}

struct Core {
  Core() { spdlog::set_level(spdlog::level::off); }  // no log line per input
  // Opens the store at ScratchDir()/delayd.db as it is (a target may have
  // written the file first) and recovers the engine from it.
  // `rows`: recover from these instead of the file (FlakyStore::recovered).
  Status Open(std::optional<store::Recovered> rows = std::nullopt) {
    auto s = store::SqliteStore::Open(
        {.path = (ScratchDir() / "delayd.db").string(), .writer_nice = 0},
        [this](std::function<void()> f) { boost::asio::post(io, std::move(f)); });
    if (!s.ok()) return s.status();
    store = std::move(s).value();
    writes = std::make_unique<store::testing::FlakyStore>(
        *store, [this](std::function<void()> f) { boost::asio::post(io, std::move(f)); });
    writes->recovered = std::move(rows);
    engine =
        std::make_unique<engine::Engine>(*writes, clock, engine::EngineOptions{}, [](int64_t) {});
    return engine->Recover();
  }
  // Runs the loop until `done` holds, the loop has been idle for 20 ms with
  // no store write outstanding (a reserve waiting for a job that cannot
  // come, as time stands still), or
  // `budget` passes; returns `done()`.
  template <typename Pred>
  bool RunUntil(Pred done, std::chrono::milliseconds budget = std::chrono::milliseconds(1000)) {
    const auto deadline = std::chrono::steady_clock::now() + budget;
    int idle = 0;
    while (!done() && idle < 4 && std::chrono::steady_clock::now() < deadline) {
      io.restart();
      const bool ran = io.run_one_for(std::chrono::milliseconds(5)) > 0;
      idle = ran || writes->pending() > 0 ? 0 : idle + 1;
    }
    return done();
  }
  ~Core() {
    if (store) store->Close();
    io.restart();
    io.poll();
    engine.reset();
    writes.reset();
    store.reset();
  }

  boost::asio::io_context io;
  ManualClock clock{1'795'305'600'000'000};  // 2026-11-22T00:00:00Z
  std::unique_ptr<store::SqliteStore> store;
  std::unique_ptr<store::testing::FlakyStore> writes;  // what the engine writes through
  std::unique_ptr<engine::Engine> engine;
};

// Empties the scratch directory for the next input.
inline void ResetScratch() {
  std::filesystem::remove_all(ScratchDir());
  std::filesystem::create_directories(ScratchDir());
}

}  // namespace delayd::fuzz
