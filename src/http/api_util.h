// Request helpers shared by the API's route handlers: the JSON body, query
// parameters, ids and topic names, each failing with the field at fault.
#pragma once

#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "engine/api_types.h"
#include "http/server.h"

namespace delayd::http {

using Query = std::vector<std::pair<std::string, std::string>>;

// `s` cut at each `sep` (n separators make n + 1 parts, empty ones kept).
std::vector<std::string_view> Split(std::string_view s, char sep);
// The request body as JSON; an empty body is an error when `required`, else {}.
Result<nlohmann::json> ParseBody(const Request& req, bool required);
// The request's W3C trace context (traceparent and tracestate headers, or
// gRPC metadata) into `spec`, by common/trace_context.h's rules: a
// traceparent that breaks them is ignored with its tracestate, as the spec
// says a receiver does; nothing is refused for it.
void TakeTraceContext(const Request& req, engine::JobSpec* spec);
std::optional<std::string> QueryValue(const Query& q, std::string_view name);
// The integer parameter `name` within [lo, hi], or `dflt` when absent.
Result<int64_t> QueryInt(const Query& q, const char* name, int64_t lo, int64_t hi, int64_t dflt);
// A positive id from the path; `what` names it in the error ("job").
Result<uint64_t> ParseId(const std::string& s, const char* what);
// beanstalkd's tube-name rules.
Status CheckTopicName(const std::string& name);
// A job filter (GET /v1/jobs, POST /v1/bulk): topic, state, key_prefix,
// due_after, due_before (RFC 3339), error (text in the last error), and
// body_field with an optional body_value (a field of a JSON body, see
// JsonFieldTest). A parameter neither these nor one of `more` is an error;
// `prefix` goes before names in errors ("filter.").
Result<engine::ListFilter> ParseListFilter(const Query& q,
                                           std::initializer_list<std::string_view> more,
                                           const std::string& prefix = "");

}  // namespace delayd::http
