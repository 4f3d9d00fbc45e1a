// The gRPC form of delayd's refusals (doc/grpc.md, "Errors"): a code for
// each kind of problem (common/problem.h), and the refusal described in the
// call's grpc-status-details-bin trailer as google.rpc.Status lays it out,
// with a google.rpc.BadRequest naming a refused field and the HTTP API's
// problem (delayd.v1.Problem).
#pragma once

#include <grpcpp/support/status.h>

#include "common/problem.h"
#include "common/status.h"

namespace delayd::rpc {

inline constexpr char kBadRequestType[] = "type.googleapis.com/google.rpc.BadRequest";
inline constexpr char kProblemType[] = "type.googleapis.com/delayd.v1.Problem";

// The code of a problem: by its kind (slug), else by its HTTP status.
grpc::StatusCode GrpcCode(const Problem& p);

// The code, a message naming the refused field ("delay: is longer than the
// longest delay") and the details.
grpc::Status ToGrpc(const Problem& p);
// OK for an ok status; otherwise ToGrpc(ProblemOf(s)).
grpc::Status ToGrpc(const Status& s);

}  // namespace delayd::rpc
