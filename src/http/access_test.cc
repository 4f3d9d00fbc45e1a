#include "http/access.h"

#include <gtest/gtest.h>

namespace delayd::http {
namespace {

Request Req(std::string method, std::string host, std::string origin = "",
            std::string content_type = "", std::string body = "") {
  Request r;
  r.method = std::move(method);
  r.path = "/v1/jobs";
  r.host = std::move(host);
  r.origin = std::move(origin);
  r.content_type = std::move(content_type);
  r.body = std::move(body);
  r.local_loopback = true;
  return r;
}

TEST(AccessTest, ALoopbackListenerAnswersOnlyLoopbackHostNames) {
  AccessOptions o;
  for (const char* ok : {"localhost", "localhost:8080", "127.0.0.1:8080", "127.9.8.7", "[::1]:80",
                         "LOCALHOST", "app.localhost:1", ""}) {
    EXPECT_FALSE(CheckHost(Req("GET", ok), o)) << ok;
  }
  for (const char* bad : {"evil.example", "evil.example:8080", "127.0.0.1.evil.example",
                          "localhost.evil.example", "10.0.0.1", "128.0.0.1", "[::2]", "127.1"}) {
    auto refused = CheckHost(Req("GET", bad), o);
    ASSERT_TRUE(refused) << bad;
    EXPECT_EQ(refused->status, 403);
    EXPECT_STREQ(refused->slug, "forbidden-host");
  }
  o.allowed_hosts = {"Delayd.Internal"};
  EXPECT_FALSE(CheckHost(Req("GET", "delayd.internal:8080"), o));
  // A listener on another address (behind a proxy, say) is not checked.
  Request r = Req("GET", "evil.example");
  r.local_loopback = false;
  EXPECT_FALSE(CheckHost(r, AccessOptions{}));
}

TEST(AccessTest, ARequestFromAnotherOriginIsRefusedUnlessListed) {
  AccessOptions o;
  EXPECT_FALSE(CheckOrigin(Req("POST", "127.0.0.1:8080"), o));  // no Origin: not a page
  EXPECT_FALSE(CheckOrigin(Req("POST", "127.0.0.1:8080", "http://127.0.0.1:8080"), o));
  EXPECT_FALSE(CheckOrigin(Req("POST", "delayd.example:443", "https://delayd.example:443"), o));
  auto refused = CheckOrigin(Req("POST", "127.0.0.1:8080", "http://evil.example"), o);
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 403);
  EXPECT_STREQ(refused->slug, "cross-origin");
  // Same host, another port or scheme: another origin.
  EXPECT_TRUE(CheckOrigin(Req("GET", "127.0.0.1:8080", "http://127.0.0.1:9090"), o));
  EXPECT_TRUE(CheckOrigin(Req("GET", "127.0.0.1:8080", "null"), o));
  o.allowed_origins = {"https://ops.example.com/"};
  EXPECT_FALSE(CheckOrigin(Req("POST", "127.0.0.1:8080", "https://OPS.example.com"), o));
}

TEST(AccessTest, AChangeMustBeSentAsJson) {
  EXPECT_FALSE(CheckContentType(Req("GET", "", "", "text/plain", "x")));
  EXPECT_FALSE(CheckContentType(Req("POST", "", "", "", "")));  // no body, no type
  EXPECT_FALSE(CheckContentType(Req("POST", "", "", "application/json", "{}")));
  EXPECT_FALSE(CheckContentType(Req("PATCH", "", "", "Application/JSON; charset=utf-8", "{}")));
  EXPECT_FALSE(CheckContentType(Req("PATCH", "", "", "application/merge-patch+json", "{}")));
  for (const char* bad : {"text/plain", "application/x-www-form-urlencoded",
                          "multipart/form-data; boundary=x", "application/jsonx"}) {
    auto refused = CheckContentType(Req("POST", "", "", bad, "{}"));
    ASSERT_TRUE(refused) << bad;
    EXPECT_EQ(refused->status, 415);
  }
  EXPECT_TRUE(CheckContentType(Req("DELETE", "", "", "", "{}")));  // a body says what it is
  // An HTML form without fields still says what it sends.
  EXPECT_TRUE(CheckContentType(Req("POST", "", "", "application/x-www-form-urlencoded", "")));
}

TEST(AccessTest, TokensGrantTheirScope) {
  AccessOptions none;
  EXPECT_EQ(ScopeOf(Req("POST", ""), none), Scope::kFull);
  AccessOptions o;
  o.token = "full-secret";
  o.read_token = "read-secret";
  Request r = Req("GET", "");
  EXPECT_EQ(ScopeOf(r, o), Scope::kNone);
  r.authorization = "Bearer full-secret";
  EXPECT_EQ(ScopeOf(r, o), Scope::kFull);
  r.authorization = "bearer read-secret";
  EXPECT_EQ(ScopeOf(r, o), Scope::kRead);
  for (const char* bad : {"Bearer full-secre", "Bearer full-secrets", "Bearer ", "full-secret",
                          "Basic full-secret", "Bearer read-secret "}) {
    r.authorization = bad;
    EXPECT_EQ(ScopeOf(r, o), Scope::kNone) << bad;
  }
  EXPECT_TRUE(ConstantTimeEquals("abc", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abd"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "ab"));
}

}  // namespace
}  // namespace delayd::http
