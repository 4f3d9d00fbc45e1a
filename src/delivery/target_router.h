// The dispatcher's sender: each push goes through the sender of its
// target's kind, which the URL's scheme names (common/target_kind.h):
// grpc:// and grpcs:// to rpc::GrpcSender, kafka:// to brokers::KafkaSender,
// amqp:// to brokers::AmqpSender, the rest (http://, https://) to
// HttpClient. Alert webhooks do not come through here: they are HTTP only.
#pragma once

#include "common/target_kind.h"
#include "delivery/http_client.h"

namespace delayd::delivery {

class TargetRouter final : public HttpSender {
 public:
  TargetRouter(HttpSender& http, HttpSender& grpc, HttpSender& kafka, HttpSender& amqp)
      : http_(http), grpc_(grpc), kafka_(kafka), amqp_(amqp) {}
  void Send(OutRequest request, Callback done) override {
    HttpSender* to = &http_;
    switch (KindOfUrl(request.url)) {
      case TargetKind::kGrpc:
        to = &grpc_;
        break;
      case TargetKind::kKafka:
        to = &kafka_;
        break;
      case TargetKind::kAmqp:
        to = &amqp_;
        break;
      case TargetKind::kHttp:
        break;
    }
    to->Send(std::move(request), std::move(done));
  }

 private:
  HttpSender& http_;
  HttpSender& grpc_;
  HttpSender& kafka_;
  HttpSender& amqp_;
};

}  // namespace delayd::delivery
