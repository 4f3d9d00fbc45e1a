// The gRPC API as the HTTP API (doc/grpc.md, "The listener"): a call of
// delayd.v1 is the HTTP request it stands for, and the HTTP answer is the
// call's response, so that every rule (tokens and scopes, field checks and
// their errors, the engine calls, the metrics) is the HTTP API's own and
// written once.
//
// Messages and the HTTP API's JSON have the same field names. Requests are
// written as JSON by reflection: numbers as numbers (not proto3 JSON's
// strings for 64-bit integers), Timestamps as RFC 3339, Durations as
// milliseconds, an enum as its value's name lowercased without the enum's
// prefix (JOB_STATE_READY: "ready"), and a `body` of bytes as `body_base64`,
// or as the JSON text itself when the message's `body_is_json` is set.
// Answers are read back the same way: members the message does not have are
// skipped (`counters`), and a job's `body` is its exact source text.
//
// Threading: none of its own; pure functions.
#pragma once

#include <google/protobuf/message.h>

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "common/problem.h"
#include "common/status.h"

namespace delayd::rpc {

// The HTTP request a call stands for.
struct HttpCall {
  std::string method;
  std::string path;   // percent-encoded
  std::string query;  // percent-encoded, without '?'
  std::string body;   // a JSON text, or empty
};

// `m` as the JSON object the HTTP API takes, without the fields in `skip`
// (those in the path). Errors name the refused field after `prefix`
// ("jobs[2].body"): a body that is not the JSON text it says it is, a
// Timestamp outside years 1-9999, an enum value the contract does not have.
Result<std::string> RequestJson(const google::protobuf::Message& m,
                                const std::vector<std::string_view>& skip = {},
                                const std::string& prefix = "");

// Fills each of `ms` from the JSON object `text` (an answer of the HTTP API;
// a submission fills the job and the response around it), parsed once. An
// error means the answer does not fit the message: a bug of the contract.
Status FillFromJson(std::string_view text, std::initializer_list<google::protobuf::Message*> ms);

// The HTTP API's problem document (its body and status) as a Problem.
Problem ProblemFromJson(int http_status, std::string_view text);

}  // namespace delayd::rpc
