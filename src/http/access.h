// Who may use the API, checked before a request is routed: the browser
// defences (a foreign Host on a loopback listener, a foreign Origin, a
// state-changing request that is not JSON) and the bearer tokens with their
// scopes. Pure functions of the request, so that each rule is unit-tested.
//
// Why: a listener on 127.0.0.1 is reachable from any web page the operator
// opens. Without these checks a page on another origin can send a
// `text/plain` POST (no CORS preflight) that cancels jobs, and a page whose
// DNS name is rebound to 127.0.0.1 can read every answer.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "http/server.h"

namespace delayd::http {

struct AccessOptions {
  std::string token = {};       // non-empty: full access needs "Authorization: Bearer <token>"
  std::string read_token = {};  // non-empty: this token reads (GET) and nothing else
  // Origins ("https://ops.example.com[:port]") whose pages may call the API
  // besides the server's own.
  std::vector<std::string> allowed_origins = {};
  // Host names a loopback listener answers besides loopback names and
  // addresses ("delayd.internal").
  std::vector<std::string> allowed_hosts = {};
};

// A refusal: the HTTP status, the problem type's slug and the detail.
struct Refusal {
  int status;
  const char* slug;
  const char* title;
  std::string detail;
};

// A loopback listener answers only Host values that are loopback names
// (localhost, *.localhost) or addresses (127.0.0.0/8, ::1), or listed in
// `allowed_hosts`; a request without Host (HTTP/1.0) passes.
std::optional<Refusal> CheckHost(const Request& req, const AccessOptions& options);
// A request whose Origin is neither the server's own (http:// or https://
// and its Host) nor listed is refused; one without Origin (not from a browser page, or a
// same-origin GET) passes.
std::optional<Refusal> CheckOrigin(const Request& req, const AccessOptions& options);
// A POST, PUT, PATCH or DELETE with a body, or with any Content-Type, must
// say application/json (or a +json type): the types an HTML form or a
// simple cross-origin request can send are not.
std::optional<Refusal> CheckContentType(const Request& req);

enum class Scope { kNone, kRead, kFull };
// What the request's bearer token grants, compared in constant time. With no
// token configured at all, everything is kFull.
Scope ScopeOf(const Request& req, const AccessOptions& options);
// Whether `method` only reads.
bool ReadOnlyMethod(std::string_view method);

// Compares in time that depends on the lengths only, not on where the
// strings first differ.
bool ConstantTimeEquals(std::string_view a, std::string_view b);

}  // namespace delayd::http
