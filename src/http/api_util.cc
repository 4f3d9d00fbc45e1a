#include "http/api_util.h"

#include <charconv>

#include "common/json_text.h"

namespace delayd::http {

using nlohmann::json;

Result<json> ParseBody(const Request& req, bool required) {
  if (req.body.empty()) {
    if (required) return Status::InvalidField("body", "a JSON body is required");
    return json::object();
  }
  // The body is read as JSON whatever Content-Type says: curl -d sends
  // form encoding by default, and the JSON error below is clearer.
  return ParseJson(req.body, "body");
}

std::optional<std::string> QueryValue(const std::vector<std::pair<std::string, std::string>>& q,
                                      std::string_view name) {
  for (auto& [k, v] : q) {
    if (k == name) return v;
  }
  return std::nullopt;
}

Result<int64_t> QueryInt(const std::vector<std::pair<std::string, std::string>>& q,
                         const char* name, int64_t lo, int64_t hi, int64_t dflt) {
  auto v = QueryValue(q, name);
  if (!v) return dflt;
  int64_t n = 0;
  auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), n);
  if (ec != std::errc() || p != v->data() + v->size() || n < lo || n > hi) {
    return Status::InvalidField(
        name, "must be an integer from " + std::to_string(lo) + " to " + std::to_string(hi));
  }
  return n;
}

Result<uint64_t> ParseId(const std::string& s, const char* what) {
  uint64_t id = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), id);
  if (ec != std::errc() || p != s.data() + s.size() || id == 0) {
    return Status::InvalidField("id", std::string("must be a positive integer ") + what + " id");
  }
  return id;
}

Status CheckTopicName(const std::string& name) {
  static constexpr std::string_view kAllowed =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-+/;.$_()";
  if (name.empty() || name.size() > 200 || name.front() == '-' ||
      name.find_first_not_of(kAllowed) != std::string::npos) {
    return Status::InvalidField("topic",
                                "must be 1-200 characters of letters, digits and -+/;.$_() "
                                "(beanstalkd's tube names), not starting with -");
  }
  return Status::Ok();
}

}  // namespace delayd::http
