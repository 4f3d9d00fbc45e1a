#include "http/api.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>

namespace delayd::http {
namespace {

TEST(OpenApiTest, DocumentsEveryRoute) {
  nlohmann::json doc = nlohmann::json::parse(Api::OpenApiDocument());
  ASSERT_TRUE(doc.contains("paths"));
  for (const RouteSpec& r : Api::Routes()) {
    std::string method = r.method;
    std::transform(method.begin(), method.end(), method.begin(),
                   [](unsigned char c) { return std::tolower(c); });
    ASSERT_TRUE(doc["paths"].contains(r.pattern)) << r.pattern << " is not documented";
    EXPECT_TRUE(doc["paths"][r.pattern].contains(method))
        << r.method << " " << r.pattern << " is not documented";
  }
}

TEST(OpenApiTest, DocumentsNoRouteThatDoesNotExist) {
  nlohmann::json doc = nlohmann::json::parse(Api::OpenApiDocument());
  for (auto& [path, ops] : doc["paths"].items()) {
    for (auto& [method, op] : ops.items()) {
      std::string upper = method;
      std::transform(upper.begin(), upper.end(), upper.begin(),
                     [](unsigned char c) { return std::toupper(c); });
      bool found = std::any_of(Api::Routes().begin(), Api::Routes().end(), [&](const RouteSpec& r) {
        return r.pattern == path && r.method == upper;
      });
      EXPECT_TRUE(found) << upper << " " << path << " is documented but not served";
    }
  }
}

// The scope each operation documents is the one the router asks for; and
// the rule as users read it: GETs read, a topic's settings and pause are
// admin's.
TEST(OpenApiTest, EveryApiRouteDocumentsTheScopeItNeeds) {
  nlohmann::json doc = nlohmann::json::parse(Api::OpenApiDocument());
  int admin = 0;
  for (const RouteSpec& r : Api::Routes()) {
    if (std::string_view(r.pattern).rfind("/v1/", 0) != 0) continue;
    std::string method = r.method;
    std::transform(method.begin(), method.end(), method.begin(),
                   [](unsigned char c) { return std::tolower(c); });
    const Scope scope = Api::RequiredScope(r);
    EXPECT_EQ(doc["paths"][r.pattern][method].value("x-delayd-scope", ""), ScopeName(scope))
        << r.method << " " << r.pattern;
    if (method == "get") {
      EXPECT_EQ(scope, Scope::kRead) << r.pattern;
    }
    if (scope == Scope::kAdmin) {
      ++admin;
      EXPECT_EQ(std::string_view(r.pattern).rfind("/v1/topics/{topic}", 0), 0u) << r.pattern;
    }
  }
  EXPECT_EQ(admin, 3) << "PUT a topic, pause it, resume it";
}

TEST(JobJsonTest, Base64RoundTripsEveryLength) {
  std::string bytes;
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(Base64Decode(Base64Encode(bytes)), bytes);
    bytes += static_cast<char>(i * 37);
  }
  EXPECT_EQ(Base64Encode("hello"), "aGVsbG8=");
  EXPECT_FALSE(Base64Decode("abc").has_value());
  EXPECT_FALSE(Base64Decode("ab!=").has_value());
}

}  // namespace
}  // namespace delayd::http
