#include "protocol/beanstalk/session.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <cstring>

namespace delayd::beanstalk {

namespace asio = boost::asio;

Session::Session(Socket socket, SessionContext& ctx) : socket_(std::move(socket)), ctx_(ctx) {}

Session::~Session() = default;

void Session::Start() {
  client_ = ctx_.engine.Connect(this);
  ++ctx_.counters.connections;
  ++ctx_.counters.total_connections;
  Read();
}

void Session::Close() {
  if (closed_) return;
  closed_ = true;
  reserve_slot_ = nullptr;
  ctx_.engine.Disconnect(client_);
  client_ = nullptr;
  --ctx_.counters.connections;
  if (producer_) --ctx_.counters.producers;
  if (worker_) --ctx_.counters.workers;
  boost::system::error_code ignored;
  socket_.shutdown(Socket::shutdown_both, ignored);
  socket_.close(ignored);
  if (ctx_.on_closed) ctx_.on_closed(this);
}

// ---------------------------------------------------------------- input

bool Session::InputPaused() const {
  const size_t buffered = in_.size() - in_pos_;
  if (buffered < kMaxBufferedInput) return false;
  // A body or a discard can always use more input; a command cannot.
  return mode_ != Mode::kBody && mode_ != Mode::kDiscard;
}

void Session::Read() {
  if (reading_ || closed_ || eof_ || quitting_ || InputPaused()) return;
  reading_ = true;
  auto buf = std::make_shared<std::array<char, kReadChunk>>();
  socket_.async_read_some(asio::buffer(*buf),
                          [self = shared_from_this(), buf](boost::system::error_code ec, size_t n) {
                            self->reading_ = false;
                            if (self->closed_) return;
                            self->in_.append(buf->data(), n);
                            if (ec) {
                              if (ec != asio::error::eof) {
                                self->Close();
                                return;
                              }
                              self->eof_ = true;
                            }
                            self->Process();
                          });
}

void Session::ScheduleProcess() {
  if (in_process_ || process_posted_ || closed_) return;
  process_posted_ = true;
  asio::post(socket_.get_executor(), [self = shared_from_this()] { self->Process(); });
}

void Session::Process() {
  process_posted_ = false;
  if (closed_) return;
  in_process_ = true;
  while (!closed_ && !quitting_ && Step()) {
  }
  in_process_ = false;
  if (closed_) return;
  // Keep the buffer from growing without bound at its front.
  if (in_pos_ == in_.size()) {
    in_.clear();
    in_pos_ = 0;
  } else if (in_pos_ > 64 * 1024) {
    in_.erase(0, in_pos_);
    in_pos_ = 0;
  }
  if (eof_ && !quitting_) {
    // A client that hangs up while blocked in reserve gets TIMED_OUT, as
    // beanstalkd sends to a half-closed connection; then, with every
    // complete command answered, the connection closes.
    if (reserve_slot_ != nullptr) {
      ctx_.engine.CancelReserve(client_);
      Slot* s = reserve_slot_;
      reserve_slot_ = nullptr;
      Fill(s, reply::kTimedOut);
    }
    // Close only once the remaining input cannot make a command; while
    // output is full, commands are still waiting to run.
    if (pending_ == 0 && !OutputFull()) CloseWhenFlushed();
  }
  Read();
}

bool Session::Step() {
  if (OutputFull()) return false;
  switch (mode_) {
    case Mode::kCommand:
      return StepCommand();
    case Mode::kSkipLine:
      return StepSkipLine();
    case Mode::kBody:
      return StepBody();
    case Mode::kDiscard:
      return StepDiscard();
  }
  return false;
}

namespace {
// beanstalkd's scan_line_end over its 224-byte command buffer: the line ends
// at the first '\r' if, and only if, '\n' follows it.
size_t LineLength(const char* data, size_t size) {
  const size_t window = std::min(size, kLineMax);
  if (window < 2) return 0;
  const void* cr = std::memchr(data, '\r', window - 1);
  if (cr == nullptr) return 0;
  const char* p = static_cast<const char*>(cr);
  return p[1] == '\n' ? static_cast<size_t>(p - data) + 2 : 0;
}
}  // namespace

bool Session::StepCommand() {
  const char* data = in_.data() + in_pos_;
  const size_t buffered = in_.size() - in_pos_;
  const size_t len = LineLength(data, buffered);
  if (len == 0) {
    if (buffered >= kLineMax) {
      // Too long: drop what the command buffer holds and skip to the line end.
      in_pos_ += kLineMax;
      mode_ = Mode::kSkipLine;
      return true;
    }
    return false;
  }
  Command cmd = ParseCommand(std::string_view(data, len - 2));
  const bool is_put = cmd.op == Op::kPut && cmd.error == ParseError::kNone;
  if (reserve_slot_ != nullptr || reserving_job_ || (!is_put && puts_pending_ > 0) ||
      ctx_.engine.Reading(client_)) {
    // Runs when the reserve or the puts before it are answered, or the read
    // the command before it waits for (Engine::Reading).
    return false;
  }
  in_pos_ += len;
  Execute(cmd);
  return true;
}

bool Session::StepSkipLine() {
  const char* data = in_.data() + in_pos_;
  const size_t buffered = in_.size() - in_pos_;
  const size_t len = LineLength(data, buffered);
  if (len == 0) {
    if (buffered < kLineMax) return false;
    in_pos_ += kLineMax;
    return true;
  }
  if (reserve_slot_ != nullptr || reserving_job_) return false;
  in_pos_ += len;
  mode_ = Mode::kCommand;
  Reply(reply::kBadFormat);
  return true;
}

bool Session::StepBody() {
  const size_t need = static_cast<size_t>(put_.bytes) + 2;
  if (in_.size() - in_pos_ < need) return false;
  const char* data = in_.data() + in_pos_;
  if (data[need - 2] != '\r' || data[need - 1] != '\n') {
    Reply(reply::kExpectedCrlf);
  } else {
    FinishPut(std::string(data, put_.bytes));
  }
  in_pos_ += need;
  mode_ = Mode::kCommand;
  return true;
}

bool Session::StepDiscard() {
  const size_t take = std::min<uint64_t>(discard_, in_.size() - in_pos_);
  in_pos_ += take;
  discard_ -= take;
  if (discard_ == 0) {
    Slot* s = discard_slot_;
    discard_slot_ = nullptr;
    mode_ = Mode::kCommand;
    Fill(s, reply::kJobTooBig);
    return true;
  }
  return take > 0;
}

// ---------------------------------------------------------------- commands

template <class T, class Ok>
std::function<void(Result<T>)> Session::FillWith(Ok ok) {
  Slot* slot = NewSlot();
  return [w = weak_from_this(), slot, ok = std::move(ok)](Result<T> r) {
    auto self = w.lock();
    if (!self || self->closed_) return;
    self->Fill(slot, r.ok() ? ok(r.value()) : StatusReply(r.status(), ""));
  };
}

void Session::Execute(Command& cmd) {
  if (cmd.counted) ++ctx_.counters.ops[static_cast<size_t>(cmd.op)];
  if (cmd.error == ParseError::kBadFormat) return Reply(reply::kBadFormat);
  if (cmd.error == ParseError::kUnknownCommand) return Reply(reply::kUnknownCommand);
  engine::Engine& e = ctx_.engine;
  auto fill_job = [this](std::string_view word) {
    return FillWith<engine::JobView>(
        [word](const engine::JobView& job) { return JobReply(word, job.id, *job.body); });
  };
  switch (cmd.op) {
    case Op::kPut:
      if (cmd.bytes > ctx_.max_job_size) {
        // beanstalkd reads and throws away the body before answering.
        discard_ = uint64_t{cmd.bytes} + 2;
        discard_slot_ = NewSlot();
        mode_ = Mode::kDiscard;
        return;
      }
      if (cmd.trailing_garbage) return Reply(reply::kBadFormat);
      if (!producer_) {
        producer_ = true;
        ++ctx_.counters.producers;
      }
      put_ = cmd;
      mode_ = Mode::kBody;
      return;
    case Op::kPeek:
      return e.Peek(cmd.id, fill_job("FOUND"));
    case Op::kPeekReady:
      return e.PeekReady(client_, fill_job("FOUND"));
    case Op::kPeekDelayed:
      return e.PeekDelayed(client_, fill_job("FOUND"));
    case Op::kPeekBuried:
      return e.PeekBuried(client_, fill_job("FOUND"));
    case Op::kReserve:
    case Op::kReserveWithTimeout:
    case Op::kReserveJob:
      if (!worker_) {
        worker_ = true;
        ++ctx_.counters.workers;
      }
      if (cmd.op == Op::kReserveJob) {
        reserving_job_ = true;
        auto fill = fill_job("RESERVED");
        return e.ReserveJob(client_, cmd.id,
                            [w = weak_from_this(), fill](Result<engine::JobView> r) {
                              if (auto self = w.lock()) self->reserving_job_ = false;
                              fill(std::move(r));
                            });
      }
      reserve_slot_ = NewSlot();
      e.Reserve(client_, cmd.op == Op::kReserve || cmd.timeout_s < 0 ? -1 : cmd.timeout_s * 1000);
      return;
    case Op::kDelete:
      return e.Delete(client_, cmd.id, FillOnDone(reply::kDeleted));
    case Op::kRelease:
      return e.Release(client_, cmd.id, cmd.priority, cmd.delay_s * 1000,
                       FillOnDone(reply::kReleased));
    case Op::kBury:
      return e.Bury(client_, cmd.id, cmd.priority, FillOnDone(reply::kBuried));
    case Op::kKick:
      return e.Kick(client_, cmd.bound, FillWithNumber("KICKED", NewSlot()));
    case Op::kKickJob:
      return e.KickJob(cmd.id, FillOnDone(reply::kKicked));
    case Op::kTouch:
      return e.Touch(client_, cmd.id, FillOnDone(reply::kTouched));
    case Op::kStats: {
      return e.Stats(FillWith<engine::EngineStats>([this](const engine::EngineStats& s) {
        ctx_.counters.store_writes = ctx_.store_writes ? ctx_.store_writes() : 0;
        return YamlReply(
            ServerStatsYaml(s, ctx_.counters, ctx_.process, ctx_.clock.SteadyMicros()));
      }));
    }
    case Op::kStatsJob:
      return e.StatsJob(cmd.id, FillWith<engine::JobStats>([](const engine::JobStats& s) {
                          return YamlReply(JobStatsYaml(s));
                        }));
    case Op::kStatsTube: {
      return e.StatsTube(cmd.tube, FillWith<engine::TubeStats>([](const engine::TubeStats& s) {
                           return YamlReply(TubeStatsYaml(s));
                         }));
    }
    case Op::kUse:
      e.Use(client_, cmd.tube);
      return Reply(fmt::format("USING {}\r\n", cmd.tube));
    case Op::kWatch:
      return Reply(fmt::format("WATCHING {}\r\n", e.Watch(client_, cmd.tube)));
    case Op::kIgnore: {
      auto n = e.Ignore(client_, cmd.tube);
      if (!n) return Reply(reply::kNotIgnored);
      return Reply(fmt::format("WATCHING {}\r\n", *n));
    }
    case Op::kListTubes:
      return e.TubeNames(FillWith<std::vector<std::string>>(
          [](const std::vector<std::string>& names) { return YamlReply(TubeListYaml(names)); }));
    case Op::kListTubeUsed:
      return Reply(fmt::format("USING {}\r\n", e.UsedTube(client_)));
    case Op::kListTubesWatched:
      return Reply(YamlReply(TubeListYaml(e.WatchedTubes(client_))));
    case Op::kQuit:
      quitting_ = true;
      CloseWhenFlushed();
      return;
    case Op::kPauseTube:
      return e.PauseTube(cmd.tube, cmd.delay_s * 1000, FillOnDone(reply::kPaused));
    case Op::kUnknown:
    case Op::kCount:
      return Reply(reply::kUnknownCommand);
  }
}

void Session::FinishPut(std::string body) {
  ctx_.engine.Put(client_, put_.priority, put_.delay_s * 1000, put_.ttr_s * 1000, std::move(body),
                  FillWithNumber("INSERTED", NewSlot(/*put=*/true)));
}

// ---------------------------------------------------------------- engine callbacks

void Session::OnReserved(const engine::JobView& job) {
  if (reserve_slot_ == nullptr) return;
  Slot* s = reserve_slot_;
  reserve_slot_ = nullptr;
  Fill(s, JobReply("RESERVED", job.id, *job.body));
}

void Session::OnReserveTimedOut() {
  if (reserve_slot_ == nullptr) return;
  Slot* s = reserve_slot_;
  reserve_slot_ = nullptr;
  Fill(s, reply::kTimedOut);
}

void Session::OnDeadlineSoon() {
  if (reserve_slot_ == nullptr) return;
  Slot* s = reserve_slot_;
  reserve_slot_ = nullptr;
  Fill(s, reply::kDeadlineSoon);
}

// ---------------------------------------------------------------- output

Session::Slot* Session::NewSlot(bool put) {
  slots_.push_back(Slot{false, put, {}});
  ++pending_;
  if (put) ++puts_pending_;
  return &slots_.back();  // deque::push_back keeps references to elements valid
}

void Session::Fill(Slot* slot, std::string_view data) {
  slot->data.assign(data);
  slot->ready = true;
  --pending_;
  if (slot->put) --puts_pending_;
  queued_bytes_ += data.size();
  Flush();
  ScheduleProcess();
}

void Session::Reply(std::string_view data) { Fill(NewSlot(), data); }

std::function<void(Result<uint64_t>)> Session::FillWithNumber(std::string_view word, Slot* slot) {
  return [w = weak_from_this(), slot, word](Result<uint64_t> r) {
    auto self = w.lock();
    if (!self || self->closed_) return;
    if (r.ok()) {
      self->Fill(slot, fmt::format("{} {}\r\n", word, r.value()));
    } else {
      self->Fill(slot, StatusReply(r.status(), ""));
    }
  };
}

std::function<void(const Status&)> Session::FillOnDone(std::string_view ok) {
  Slot* s = NewSlot();
  return [w = weak_from_this(), s, ok](const Status& st) {
    auto self = w.lock();
    if (!self || self->closed_) return;
    self->Fill(s, StatusReply(st, ok));
  };
}

void Session::Flush() {
  while (!slots_.empty() && slots_.front().ready) {
    out_ += slots_.front().data;
    slots_.pop_front();
  }
  if (writing_ || out_.empty() || closed_) return;
  writing_ = true;
  auto buf = std::make_shared<std::string>();
  buf->swap(out_);
  asio::async_write(socket_, asio::buffer(*buf),
                    [self = shared_from_this(), buf](boost::system::error_code ec, size_t n) {
                      self->writing_ = false;
                      if (self->closed_) return;
                      if (ec) {
                        self->Close();
                        return;
                      }
                      self->queued_bytes_ -= n;
                      self->Flush();
                      if (self->quitting_) self->CloseWhenFlushed();
                      self->ScheduleProcess();
                    });
}

void Session::CloseWhenFlushed() {
  if (pending_ == 0 && slots_.empty() && out_.empty() && !writing_) Close();
}

}  // namespace delayd::beanstalk
