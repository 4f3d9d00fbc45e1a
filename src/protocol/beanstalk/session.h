// Session: one beanstalk protocol connection.
//
// Input is framed as beanstalkd frames it (a command line of at most 224
// bytes including CRLF; a put's body of exactly the announced size plus
// CRLF). Replies leave in command order. Commands run without waiting for the
// store, so a pipelining client gets group commit; the exceptions: a
// command other than put waits until this connection's earlier puts are
// acknowledged, because a put is invisible until durable and a following
// stats or peek must see it as beanstalkd would; a command waits while the
// one before it reads the store before it takes effect (a kick of jobs
// beyond a window, on PostgreSQL; Engine::Reading), so that it never
// overtakes that one. A blocked reserve holds up the commands after it, as
// in beanstalkd.
//
// Memory per connection is bounded: reading pauses while 256 KiB of input is
// buffered and no progress is possible, and command processing pauses while
// 4 MiB of replies wait for a client that does not read them.
//
// Threading: runs on the event loop thread, like the engine.
#pragma once

#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/io_context.hpp>
#include <deque>
#include <functional>
#include <memory>
#include <string>

#include "common/clock.h"
#include "engine/engine.h"
#include "protocol/beanstalk/codec.h"
#include "protocol/beanstalk/replies.h"

namespace delayd::beanstalk {

struct SessionContext {
  engine::Engine& engine;
  const Clock& clock;
  ServerCounters& counters;
  const ProcessInfo& process;
  uint64_t max_job_size = engine::kDefaultMaxJobBytes;
  // Store writes so far, for stats (binlog-records-written).
  std::function<uint64_t()> store_writes;
  // Called once when the session has closed (the server forgets it).
  std::function<void(class Session*)> on_closed;
};

class Session : public std::enable_shared_from_this<Session>, public engine::ClientObserver {
 public:
  using Socket = boost::asio::generic::stream_protocol::socket;

  // `ctx` must outlive the session.
  Session(Socket socket, SessionContext& ctx);
  ~Session() override;

  void Start();
  // True while the session owes a reply that will come by itself (not a
  // blocked reserve, which may wait forever) or has replies still being
  // written. Shutdown waits for this before closing.
  bool HasPendingReplies() const {
    return pending_ > (reserve_slot_ != nullptr ? 1u : 0u) || writing_ || !out_.empty();
  }
  // Closes the connection now; reserved jobs return to ready.
  void Close();

  // engine::ClientObserver
  void OnReserved(const engine::JobView& job) override;
  void OnReserveTimedOut() override;
  void OnDeadlineSoon() override;
  void OnReadsAnswered() override { ScheduleProcess(); }

 private:
  enum class Mode { kCommand, kSkipLine, kBody, kDiscard };
  struct Slot {
    bool ready = false;
    bool put = false;  // a put's reply: other commands wait until it is ready
    std::string data;
  };

  void Read();
  void Process();
  void ScheduleProcess();
  // Handles one unit of buffered input; false when it cannot progress now.
  bool Step();
  bool StepCommand();
  bool StepSkipLine();
  bool StepBody();
  bool StepDiscard();
  void Execute(Command& cmd);
  void FinishPut(std::string body);

  Slot* NewSlot(bool put = false);
  void Fill(Slot* slot, std::string_view data);
  void Reply(std::string_view data);  // a reply ready at once
  std::function<void(const Status&)> FillOnDone(std::string_view ok);
  // Fills `slot` with "<word> <n>\r\n" on success (INSERTED, KICKED).
  std::function<void(Result<uint64_t>)> FillWithNumber(std::string_view word, Slot* slot);
  // Fills a new slot with `ok(value)` on success, else the error's reply.
  template <class T, class Ok>
  std::function<void(Result<T>)> FillWith(Ok ok);
  void Flush();
  bool OutputFull() const { return queued_bytes_ > kMaxQueuedOutput; }
  bool InputPaused() const;
  void CloseWhenFlushed();

  static constexpr size_t kReadChunk = 64 * 1024;
  static constexpr size_t kMaxBufferedInput = 256 * 1024;
  static constexpr size_t kMaxQueuedOutput = 4 * 1024 * 1024;

  Socket socket_;
  SessionContext& ctx_;
  engine::Client* client_ = nullptr;

  std::string in_;  // unprocessed input starts at in_pos_
  size_t in_pos_ = 0;
  Mode mode_ = Mode::kCommand;
  Command put_;           // the put whose body is being read
  uint64_t discard_ = 0;  // bytes still to throw away in kDiscard
  Slot* discard_slot_ = nullptr;

  std::deque<Slot> slots_;        // replies in command order
  size_t puts_pending_ = 0;       // put replies not yet ready
  size_t pending_ = 0;            // replies not yet ready
  Slot* reserve_slot_ = nullptr;  // the blocked reserve, if any
  // A reserve-job not yet answered (the job was read from the store): later
  // commands wait for it, as they may act on the job it reserves.
  bool reserving_job_ = false;

  std::string out_;  // replies being written
  size_t queued_bytes_ = 0;
  bool reading_ = false;
  bool writing_ = false;
  bool in_process_ = false;
  bool process_posted_ = false;
  bool eof_ = false;
  bool quitting_ = false;
  bool closed_ = false;
  bool producer_ = false;
  bool worker_ = false;
};

}  // namespace delayd::beanstalk
