#include "common/status.h"

namespace delayd {

std::string Status::ToString() const {
  const char* name = "OK";
  switch (code_) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kNotFound:
      name = "NOT_FOUND";
      break;
    case StatusCode::kInvalidArgument:
      name = "INVALID_ARGUMENT";
      break;
    case StatusCode::kIoError:
      name = "IO_ERROR";
      break;
    case StatusCode::kNoSpace:
      name = "NO_SPACE";
      break;
    case StatusCode::kUnavailable:
      name = "UNAVAILABLE";
      break;
    case StatusCode::kConflict:
      name = "CONFLICT";
      break;
    case StatusCode::kFenced:
      name = "FENCED";
      break;
    case StatusCode::kInternal:
      name = "INTERNAL";
      break;
    case StatusCode::kUnknown:
      name = "UNKNOWN_OUTCOME";
      break;
  }
  return std::string(name) + ": " + message_;
}

}  // namespace delayd
