// Which headers a job may give its push request (a job's target, a topic's
// default target, a timer's template). A job's headers must never reframe
// the request (Content-Length, Transfer-Encoding: request smuggling at the
// target or a proxy), steer the connection (hop-by-hop headers, Host,
// Expect, Proxy-*), or imitate delayd's own (Delayd-*: a forged signature
// or job id). Checked when a target is submitted, and again at delivery for
// targets stored before a rule existed.
#pragma once

#include <string>
#include <string_view>

namespace delayd {

// "" when a job may send header `name: value`, else why not (a sentence
// without the header's name).
std::string TargetHeaderFault(std::string_view name, std::string_view value);

// Whether `name` is an RFC 9110 token (a valid field name).
bool IsHttpToken(std::string_view name);

}  // namespace delayd
