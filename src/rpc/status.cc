#include "rpc/status.h"

#include "common/problem.h"
#include "delayd/v1/errors.pb.h"

namespace delayd::rpc {

grpc::StatusCode GrpcCode(const Status& s) {
  switch (s.code()) {
    case StatusCode::kOk:
      return grpc::StatusCode::OK;
    case StatusCode::kNotFound:
      return grpc::StatusCode::NOT_FOUND;
    case StatusCode::kInvalidArgument:
      return grpc::StatusCode::INVALID_ARGUMENT;
    case StatusCode::kConflict:
      // A field clashing with what the server holds (a name in use), or an
      // operation the job's state forbids.
      return s.field().empty() ? grpc::StatusCode::FAILED_PRECONDITION
                               : grpc::StatusCode::ALREADY_EXISTS;
    case StatusCode::kUnavailable:
    case StatusCode::kFenced:
    case StatusCode::kIoError:
      return grpc::StatusCode::UNAVAILABLE;
    case StatusCode::kNoSpace:
      return grpc::StatusCode::RESOURCE_EXHAUSTED;
    case StatusCode::kUnknown:
      return grpc::StatusCode::UNKNOWN;
    case StatusCode::kInternal:
      break;
  }
  return grpc::StatusCode::INTERNAL;
}

grpc::Status ToGrpc(const Status& s) {
  if (s.ok()) return grpc::Status::OK;
  const Problem p = ProblemOf(s);
  const grpc::StatusCode code = GrpcCode(s);
  const std::string message = p.field.empty() ? p.detail : p.field + ": " + p.detail;

  delayd::v1::Status details;
  details.set_code(code);
  details.set_message(message);
  if (!p.field.empty() && s.code() == StatusCode::kInvalidArgument) {
    delayd::v1::BadRequest bad;
    auto* v = bad.add_field_violations();
    v->set_field(p.field);
    v->set_description(p.detail);
    auto* any = details.add_details();
    any->set_type_url(kBadRequestType);
    any->set_value(bad.SerializeAsString());
  }
  delayd::v1::Problem problem;
  problem.set_type(p.type());
  problem.set_title(p.title);
  problem.set_detail(p.detail);
  problem.set_field(p.field);
  for (uint64_t id : p.job_ids) problem.add_job_ids(id);
  auto* any = details.add_details();
  any->set_type_url(kProblemType);
  any->set_value(problem.SerializeAsString());
  return grpc::Status(code, message, details.SerializeAsString());
}

}  // namespace delayd::rpc
