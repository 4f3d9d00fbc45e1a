// AmqpSender: push deliveries to RabbitMQ targets
// (amqp://USER:PASS@HOST:PORT/VHOST?exchange=NAME&routing_key=KEY), each a
// persistent, mandatory basic.publish on a channel in confirm mode with the
// body byte for byte, the job id as message_id and delayd's headers and the
// target's own as AMQP headers; done once the broker acks it
// (doc/brokers.md, "RabbitMQ").
//
// One connection per broker account (host, port, vhost, user, password),
// shared by every job sent there, each on a thread of its own since
// rabbitmq-c is blocking: the thread connects (the target policy judging
// each resolved address), logs in, opens a channel in confirm mode, publishes
// what the loop hands it (up to 1,000 unconfirmed) and reads the broker's
// acks, nacks, returns and closes. A connection that fails is rebuilt with
// backoff (100 ms doubling to 10 s); a publish waits for it no longer than
// its target's timeout.
//
// Outcomes: ack -> acknowledged; a refused login or vhost, or a channel
// closed naming the publish's exchange (missing, or not this user's) ->
// rejected; a return (no queue bound: the message was unroutable), a nack, a
// lost connection or no confirm within the timeout -> failed (retried).
//
// Threading: Send() and Stop() on the event loop, whose executor runs every
// callback.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "common/clock.h"
#include "common/executor.h"
#include "delivery/http_client.h"
#include "delivery/target_policy.h"

namespace delayd::brokers {

class AmqpSender final : public delivery::HttpSender {
 public:
  // `policy` and `clock` must outlive the sender, and `policy` must not
  // change while it lives: the sender's own threads read it.
  AmqpSender(Executor executor, const delivery::TargetPolicy& policy, const Clock& clock);
  ~AmqpSender() override;  // Stop()
  AmqpSender(const AmqpSender&) = delete;
  AmqpSender& operator=(const AmqpSender&) = delete;

  void Send(delivery::OutRequest request, Callback done) override;
  // Closes every connection: publishes not yet confirmed are abandoned and
  // their callbacks never run (their jobs are sent again once their leases
  // run out: at least once). Later sends are dropped.
  void Stop();

  // Connections kept (for tests and /metrics).
  size_t connections() const { return connections_.size(); }

  struct Connection;  // amqp_sender.cc

 private:
  void Fail(Callback done, delivery::OutResult r);  // reported on the loop
  void DropIdle(int64_t now_us);

  Executor executor_;
  const delivery::TargetPolicy& policy_;
  const Clock& clock_;
  std::map<std::string, std::unique_ptr<Connection>> connections_;  // by account
  int64_t swept_us_ = 0;
  bool stopped_ = false;
};

}  // namespace delayd::brokers
