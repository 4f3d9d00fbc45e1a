// A push target's kind, named by its URL's scheme (design.md, "Push
// delivery"; doc/brokers.md): what carries each attempt, and the label
// /metrics, the job's JSON, the console and delayctl show it by.
#pragma once

#include <array>
#include <string_view>

#include "common/amqp_url.h"
#include "common/grpc_url.h"
#include "common/kafka_url.h"

namespace delayd {

enum class TargetKind { kHttp, kGrpc, kKafka, kAmqp };
inline constexpr std::array<TargetKind, 4> kTargetKinds = {TargetKind::kHttp, TargetKind::kGrpc,
                                                           TargetKind::kKafka, TargetKind::kAmqp};

// http(s):// and anything unknown (which the API never accepts) is HTTP.
inline TargetKind KindOfUrl(std::string_view url) {
  if (IsGrpcUrl(url)) return TargetKind::kGrpc;
  if (IsKafkaUrl(url)) return TargetKind::kKafka;
  if (IsAmqpUrl(url)) return TargetKind::kAmqp;
  return TargetKind::kHttp;
}

inline std::string_view KindName(TargetKind k) {
  switch (k) {
    case TargetKind::kGrpc:
      return "grpc";
    case TargetKind::kKafka:
      return "kafka";
    case TargetKind::kAmqp:
      return "amqp";
    case TargetKind::kHttp:
      break;
  }
  return "http";
}

}  // namespace delayd
