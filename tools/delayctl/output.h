// Output and exit codes for delayctl: tables or the server's JSON on stdout,
// errors on stderr, and the exit codes scripts can rely on (README,
// "delayctl").
#pragma once

#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "client.h"

namespace delayctl {

// Exit codes.
constexpr int kOk = 0;
constexpr int kRefused = 1;       // the server refused the request (400, 413, other 4xx)
constexpr int kUsage = 2;         // a bad command line or input file: nothing was sent
constexpr int kNotFound = 3;      // 404
constexpr int kConflict = 4;      // 409: the job's state does not allow it
constexpr int kUnauthorized = 5;  // 401: no or a wrong token
constexpr int kUnavailable = 6;   // no answer, or 5xx: try again later
constexpr int kIncomplete = 7;    // a bulk operation ended stopped or failed; not ready

struct Ctx {
  Client client;
  bool json = false;  // --output json
};

// The exit code of a reply; for a failure also prints the server's problem
// (title, detail, field) or the transport error to stderr.
int Check(const Reply& r);
// Check, and then that the answer is an object with each of `fields`.
int CheckShape(const Reply& r, std::initializer_list<const char*> fields);
// Prints a usage error to stderr and returns kUsage.
int Usage(const std::string& message);

// A JSON value as a table cell: strings bare, null as "-".
std::string Cell(const nlohmann::json& v);
void PrintTable(const std::vector<std::string>& headers,
                const std::vector<std::vector<std::string>>& rows);
// One object as "name: value" lines, nested objects flattened ("a.b").
void PrintFields(const nlohmann::json& object);
// The reply's body exactly as the server sent it (--output json), so that a
// job's body comes back byte for byte.
void PrintRaw(const Reply& r);

}  // namespace delayctl
