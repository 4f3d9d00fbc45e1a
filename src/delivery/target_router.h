// The dispatcher's sender: each push goes through the sender of its
// target's kind, which the URL's scheme names (design.md, "Push delivery"):
// grpc:// and grpcs:// to rpc::GrpcSender, kafka:// to
// brokers::KafkaSender, the rest (http://, https://) to HttpClient. Alert
// webhooks do not come through here: they are HTTP only.
#pragma once

#include "common/grpc_url.h"
#include "common/kafka_url.h"
#include "delivery/http_client.h"

namespace delayd::delivery {

class TargetRouter final : public HttpSender {
 public:
  TargetRouter(HttpSender& http, HttpSender& grpc, HttpSender& kafka)
      : http_(http), grpc_(grpc), kafka_(kafka) {}
  void Send(OutRequest request, Callback done) override {
    HttpSender& to = IsGrpcUrl(request.url) ? grpc_ : IsKafkaUrl(request.url) ? kafka_ : http_;
    to.Send(std::move(request), std::move(done));
  }

 private:
  HttpSender& http_;
  HttpSender& grpc_;
  HttpSender& kafka_;
};

}  // namespace delayd::delivery
