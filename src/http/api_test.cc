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
