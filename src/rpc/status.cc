#include "rpc/status.h"

#include <string_view>

#include "delayd/v1/errors.pb.h"

namespace delayd::rpc {

grpc::StatusCode GrpcCode(const Problem& p) {
  const std::string_view slug = p.slug;
  if (slug == "invalid-request") return grpc::StatusCode::INVALID_ARGUMENT;
  if (slug == "not-found") return grpc::StatusCode::NOT_FOUND;
  // A field clashing with what the server holds (a name in use), or an
  // operation the job's state forbids.
  if (slug == "conflict") {
    return p.field.empty() ? grpc::StatusCode::FAILED_PRECONDITION
                           : grpc::StatusCode::ALREADY_EXISTS;
  }
  if (slug == "unavailable" || slug == "storage-unavailable") {
    return grpc::StatusCode::UNAVAILABLE;
  }
  if (slug == "storage-full") return grpc::StatusCode::RESOURCE_EXHAUSTED;
  if (slug == "outcome-unknown") return grpc::StatusCode::UNKNOWN;
  if (slug == "internal") return grpc::StatusCode::INTERNAL;
  // The HTTP API's own refusals (token, scope, route).
  switch (p.http_status) {
    case 400:
    case 415:
      return grpc::StatusCode::INVALID_ARGUMENT;
    case 401:
      return grpc::StatusCode::UNAUTHENTICATED;
    case 403:
      return grpc::StatusCode::PERMISSION_DENIED;
    case 404:
      return grpc::StatusCode::NOT_FOUND;
    case 405:
      return grpc::StatusCode::UNIMPLEMENTED;
    case 409:
      return grpc::StatusCode::FAILED_PRECONDITION;
    case 413:
    case 429:
      return grpc::StatusCode::RESOURCE_EXHAUSTED;
    case 503:
      return grpc::StatusCode::UNAVAILABLE;
    default:
      return grpc::StatusCode::INTERNAL;
  }
}

grpc::Status ToGrpc(const Problem& p) {
  const grpc::StatusCode code = GrpcCode(p);
  const std::string message = p.field.empty() ? p.detail : p.field + ": " + p.detail;

  delayd::v1::Status details;
  details.set_code(code);
  details.set_message(message);
  if (!p.field.empty() && code == grpc::StatusCode::INVALID_ARGUMENT) {
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

grpc::Status ToGrpc(const Status& s) { return s.ok() ? grpc::Status::OK : ToGrpc(ProblemOf(s)); }

}  // namespace delayd::rpc
