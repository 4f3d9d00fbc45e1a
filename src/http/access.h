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

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "http/server.h"

namespace delayd::http {

// What a bearer token may do; each scope includes the ones before it.
//   read:  GET routes (and a timer's preview), the console without actions;
//   write: besides, submit, reserve and settle, cancel, edit and act on jobs,
//          bulk actions, timers;
//   admin: besides, a topic's settings and pausing a topic.
enum class Scope { kNone, kRead, kWrite, kAdmin };
const char* ScopeName(Scope scope);  // "read", "write", "admin" ("none")
std::optional<Scope> ParseScope(std::string_view name);

// The bearer tokens a server accepts, each with its scope. Kept as SHA-256
// digests: a lookup compares values of one length with CRYPTO_memcmp and
// walks every token whichever matches, so its time tells nothing of the
// tokens; and no token stays in memory as text.
class Tokens {
 public:
  // Refuses an empty token, one with a space or a control character (it
  // could not be sent in an Authorization header as given), and one given
  // twice, with any scope; `source` names where it came from in the error.
  Status Add(Scope scope, std::string_view token, std::string_view source);
  bool empty() const { return entries_.empty(); }
  size_t size() const { return entries_.size(); }
  // The scope of `presented`, or kNone.
  Scope Find(std::string_view presented) const;

 private:
  struct Entry {
    Scope scope;
    std::array<unsigned char, 32> digest;
  };
  std::vector<Entry> entries_;
};

// Reads the text of a tokens file: one "SCOPE TOKEN" a line (SCOPE is
// admin, write or read), blank lines and lines starting with '#' ignored,
// at most 10,000 tokens. Errors name `path` and the line, never a token.
Status ParseTokensFile(std::string_view text, std::string_view path, Tokens* out);

struct AccessOptions {
  // Empty: no token needed, everyone is admin. Otherwise /v1 routes need
  // "Authorization: Bearer <token>" and a scope the route asks for.
  Tokens tokens = {};
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

// What the request's bearer token grants. With no token configured at all,
// everyone is kAdmin.
Scope ScopeOf(const Request& req, const AccessOptions& options);
// Whether `method` only reads.
bool ReadOnlyMethod(std::string_view method);

}  // namespace delayd::http
