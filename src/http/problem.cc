// The API's answers: JSON bodies, and failures as problem+json (RFC 9457)
// made from common/problem.h, which every front door shares.

#include "common/problem.h"

#include "common/json_dump.h"
#include "http/api.h"

namespace delayd::http {

using nlohmann::json;

Response Problem(int status, const char* slug, const std::string& title, const std::string& detail,
                 const std::string& field) {
  json j = {{"type", std::string("https://delayd.dev/problems/") + slug},
            {"title", title},
            {"status", status},
            {"detail", detail}};
  if (!field.empty()) j["field"] = field;
  Response r;
  r.status = status;
  r.content_type = "application/problem+json";
  r.body = DumpJson(j);
  return r;
}

Response JsonResponse(int status, const json& body) {
  return JsonTextResponse(status, DumpJson(body));
}

Response JsonTextResponse(int status, std::string text) {
  Response r;
  r.status = status;
  r.body = std::move(text);
  return r;
}

Response ProblemResponse(const Status& s) {
  const delayd::Problem p = ProblemOf(s);
  json j = {
      {"type", p.type()}, {"title", p.title}, {"status", p.http_status}, {"detail", p.detail}};
  if (!p.field.empty()) j["field"] = p.field;
  if (s.code() == StatusCode::kUnknown) j["job_ids"] = p.job_ids;
  Response r;
  r.status = p.http_status;
  r.content_type = "application/problem+json";
  r.body = DumpJson(j);
  if (!p.request_id.empty()) r.headers.emplace_back("Delayd-Request-Id", p.request_id);
  return r;
}

}  // namespace delayd::http
