// Problem: what a refused request tells its client, whichever door it came
// through (HTTP's problem+json, RFC 9457; gRPC's status details): one kind
// per status code (slug, title, HTTP status), the detail, and the field or
// jobs concerned. A store failure's own text (SQL, file names) is logged
// under a request id, which the problem gives instead.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace delayd {

struct Problem {
  int http_status = 500;
  std::string slug;  // the type is https://delayd.dev/problems/<slug>
  std::string title;
  std::string detail;
  std::string field;              // the refused field, if any
  std::vector<uint64_t> job_ids;  // outcome-unknown: the jobs to look up before submitting again
  std::string request_id;         // set when the detail is in the server's log instead

  std::string type() const { return "https://delayd.dev/problems/" + slug; }
};

// The problem a failed status makes (logging a store failure's text).
Problem ProblemOf(const Status& s);

// A fresh id for a log line a reply refers to.
std::string NewRequestId();

}  // namespace delayd
