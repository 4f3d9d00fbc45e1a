#include "http/bulk_ops.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio/post.hpp>

#include "common/time_format.h"

namespace delayd::http {

namespace {

constexpr std::pair<BulkAction, std::string_view> kActions[] = {
    {BulkAction::kCancel, "cancel"},
    {BulkAction::kRetry, "retry"},
    {BulkAction::kKick, "kick"},
    {BulkAction::kRunNow, "run-now"},
    {BulkAction::kReschedule, "reschedule"},
};

}  // namespace

std::string_view BulkActionName(BulkAction a) {
  for (auto [action, name] : kActions) {
    if (action == a) return name;
  }
  return "?";
}

std::optional<BulkAction> ParseBulkAction(std::string_view name) {
  for (auto [action, n] : kActions) {
    if (n == name) return action;
  }
  return std::nullopt;
}

std::string_view BulkStateName(BulkState s) {
  switch (s) {
    case BulkState::kRunning:
      return "running";
    case BulkState::kDone:
      return "done";
    case BulkState::kStopped:
      return "stopped";
    case BulkState::kFailed:
      return "failed";
  }
  return "?";
}

BulkOps::BulkOps(boost::asio::io_context& io, engine::Engine& engine, const Clock& clock,
                 size_t chunk)
    : io_(io), engine_(engine), clock_(clock), chunk_(chunk) {}

Result<uint64_t> BulkOps::Start(BulkRequest request) {
  const auto running = std::count_if(
      ops_.begin(), ops_.end(), [](const auto& op) { return op->state == BulkState::kRunning; });
  if (static_cast<size_t>(running) >= kMaxRunning) {
    return Status::Unavailable(std::to_string(kMaxRunning) +
                               " bulk operations are running; wait for one to end");
  }
  auto op = std::make_shared<BulkProgress>();
  op->id = next_id_++;
  op->request = std::move(request);
  op->started_ms = clock_.WallMillis();
  ops_.push_back(op);
  // Drop the oldest ended operations beyond kKeep (running ones stay).
  for (auto it = ops_.begin(); ops_.size() > kKeep && it != ops_.end();) {
    it = (*it)->state == BulkState::kRunning ? std::next(it) : ops_.erase(it);
  }
  spdlog::info("bulk {}: {}{} started", op->id, BulkActionName(op->request.action),
               op->request.dry_run ? " (dry run)" : "");
  boost::asio::post(io_, [this, op] { Step(op); });
  return op->id;
}

Status BulkOps::Stop(uint64_t id) {
  for (auto& op : ops_) {
    if (op->id != id) continue;
    op->stop_asked = true;
    return Status::Ok();
  }
  return Status::NotFound("no bulk operation " + std::to_string(id));
}

const BulkProgress* BulkOps::Find(uint64_t id) const {
  for (const auto& op : ops_) {
    if (op->id == id) return op.get();
  }
  return nullptr;
}

std::vector<const BulkProgress*> BulkOps::Recent() const {
  std::vector<const BulkProgress*> out;
  for (auto it = ops_.rbegin(); it != ops_.rend(); ++it) out.push_back(it->get());
  return out;
}

void BulkOps::Finish(BulkProgress& op, BulkState state) {
  op.state = state;
  op.finished_ms = clock_.WallMillis();
  spdlog::info("bulk {}: {} {}: {} matched, {} applied, {} skipped{}", op.id,
               BulkActionName(op.request.action), BulkStateName(state), op.matched, op.applied,
               op.skipped, op.error.empty() ? "" : " (" + op.error + ")");
}

void BulkOps::Step(std::shared_ptr<BulkProgress> op) {
  if (op->stop_asked) return Finish(*op, BulkState::kStopped);
  engine::ListFilter f = op->request.filter;
  f.after_id = op->cursor;
  f.limit = chunk_;
  if (op->request.max_jobs > 0) {
    f.limit = std::min<uint64_t>(chunk_, op->request.max_jobs - op->matched);
  }
  engine_.List(f, [this, op](Result<engine::ListPage> page) {
    if (!page.ok()) {
      op->error = page.status().ToString();
      return Finish(*op, BulkState::kFailed);
    }
    ++op->chunks;
    op->matched += page->jobs.size();
    const bool last =
        page->next_cursor == 0 || (op->request.max_jobs > 0 && op->matched >= op->request.max_jobs);
    op->cursor = page->next_cursor;
    auto next = [this, op, last] {
      if (!op->error.empty()) return Finish(*op, BulkState::kFailed);
      if (last) return Finish(*op, BulkState::kDone);
      boost::asio::post(io_, [this, op] { Step(op); });
    };
    if (op->request.dry_run || page->jobs.empty()) return next();
    // The chunk's changes all go out now; the next chunk waits for the
    // last answer.
    auto left = std::make_shared<size_t>(page->jobs.size());
    for (const engine::JobInfo& job : page->jobs) {
      Apply(op, job, [op, left, next](const Status& s) {
        if (s.ok()) {
          ++op->applied;
        } else if (s.code() == StatusCode::kConflict || s.code() == StatusCode::kNotFound) {
          ++op->skipped;
        } else {  // the store failed: the operation ends with this chunk
          ++op->skipped;
          if (op->error.empty()) op->error = s.ToString();
        }
        if (--*left == 0) next();
      });
    }
  });
}

void BulkOps::Apply(const std::shared_ptr<BulkProgress>& op, const engine::JobInfo& job,
                    std::function<void(const Status&)> done) {
  const uint64_t id = job.record.id;
  switch (op->request.action) {
    case BulkAction::kCancel:
      return engine_.Remove(id, std::move(done));
    case BulkAction::kRetry:
      return engine_.Retry(id, std::move(done));
    case BulkAction::kKick:
      return engine_.KickJob(id, std::move(done));
    case BulkAction::kRunNow:
      return engine_.RunNow(id, std::move(done));
    case BulkAction::kReschedule: {
      engine::JobPatch patch;
      const int64_t now_ms = clock_.WallMillis();
      // Both terms are bounded (a stored due time by kMaxTimeMs, a shift by
      // 2^32-1 s), so the sum cannot wrap; past the last time RFC 3339 can
      // write, the job is left as it is.
      const int64_t shifted = job.record.due_ms + op->request.shift_ms.value_or(0);
      if (!op->request.due_at_ms && shifted > kMaxTimeMs) {
        return done(Status::InvalidField("shift", "would move the job past 9999-12-31"));
      }
      patch.due_ms = op->request.due_at_ms ? *op->request.due_at_ms : std::max(now_ms, shifted);
      return engine_.Modify(id, patch, std::move(done));
    }
  }
}

}  // namespace delayd::http
