// The gRPC form of delayd's statuses (doc/grpc.md, "Errors"): a code for
// each status code, and the refusal described in the call's
// grpc-status-details-bin trailer as google.rpc.Status lays it out, with a
// google.rpc.BadRequest naming a refused field and the HTTP API's problem
// (delayd.v1.Problem), both from common/problem.h.
#pragma once

#include <grpcpp/support/status.h>

#include "common/status.h"

namespace delayd::rpc {

inline constexpr char kBadRequestType[] = "type.googleapis.com/google.rpc.BadRequest";
inline constexpr char kProblemType[] = "type.googleapis.com/delayd.v1.Problem";

grpc::StatusCode GrpcCode(const Status& s);

// OK for an ok status; otherwise the code, a message naming the refused
// field ("delay: is longer than the longest delay") and the details.
grpc::Status ToGrpc(const Status& s);

}  // namespace delayd::rpc
