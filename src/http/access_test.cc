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
  EXPECT_EQ(ScopeOf(Req("POST", ""), none), Scope::kAdmin) << "no tokens: no check";
  AccessOptions o;
  ASSERT_TRUE(o.tokens.Add(Scope::kAdmin, "admin-secret", "a").ok());
  ASSERT_TRUE(o.tokens.Add(Scope::kWrite, "write-secret", "w").ok());
  ASSERT_TRUE(o.tokens.Add(Scope::kRead, "read-secret", "r").ok());
  Request r = Req("GET", "");
  EXPECT_EQ(ScopeOf(r, o), Scope::kNone);
  r.authorization = "Bearer admin-secret";
  EXPECT_EQ(ScopeOf(r, o), Scope::kAdmin);
  r.authorization = "BEARER write-secret";
  EXPECT_EQ(ScopeOf(r, o), Scope::kWrite);
  r.authorization = "bearer read-secret";
  EXPECT_EQ(ScopeOf(r, o), Scope::kRead);
  for (const char* bad : {"Bearer admin-secre", "Bearer admin-secrets", "Bearer ", "admin-secret",
                          "Basic admin-secret", "Bearer read-secret ", "Bearer  read-secret"}) {
    r.authorization = bad;
    EXPECT_EQ(ScopeOf(r, o), Scope::kNone) << bad;
  }
}

TEST(AccessTest, ATokenIsOneWordGivenOnce) {
  Tokens t;
  EXPECT_TRUE(t.Add(Scope::kRead, "r3ad", "x").ok());
  EXPECT_FALSE(t.Add(Scope::kAdmin, "r3ad", "x").ok()) << "the same token with another scope";
  for (std::string_view bad :
       {std::string_view(""), std::string_view("two words"), std::string_view("tab\there"),
        std::string_view("nul\0", 4), std::string_view("del\x7f")}) {
    Status s = t.Add(Scope::kWrite, bad, "flag");
    EXPECT_FALSE(s.ok()) << bad;
    if (!bad.empty()) {
      EXPECT_EQ(s.message().find(bad), std::string::npos) << "the error does not repeat the token";
    }
  }
  EXPECT_EQ(t.size(), 1u);
}

TEST(AccessTest, ATokensFileHasOneScopeAndTokenALine) {
  Tokens t;
  ASSERT_TRUE(
      ParseTokensFile("# ops\n\nadmin   a-1\r\n  write\tw-1  \nread r-1\nread r-2", "f", &t).ok());
  EXPECT_EQ(t.size(), 4u);
  EXPECT_EQ(t.Find("a-1"), Scope::kAdmin);
  EXPECT_EQ(t.Find("w-1"), Scope::kWrite);
  EXPECT_EQ(t.Find("r-2"), Scope::kRead);
  EXPECT_EQ(t.Find("r-3"), Scope::kNone);
  struct Bad {
    const char* text;
    const char* where;
  };
  for (Bad bad :
       {Bad{"admin a\nsuper s3cret\n", "f:2"}, Bad{"read\n", "f:1"}, Bad{"read r x\n", "f:1"},
        Bad{"read a\n# c\nwrite a\n", "f:3"}, Bad{"Admin a\n", "f:1"}}) {
    Tokens u;
    Status s = ParseTokensFile(bad.text, "f", &u);
    ASSERT_FALSE(s.ok()) << bad.text;
    EXPECT_EQ(s.message().rfind(std::string(bad.where) + ":", 0), 0u) << s.message();
    EXPECT_EQ(s.message().find("s3cret"), std::string::npos) << s.message();
  }
  std::string many;
  for (int i = 0; i <= 10'000; ++i) many += "read t" + std::to_string(i) + "\n";
  Tokens m;
  EXPECT_FALSE(ParseTokensFile(many, "f", &m).ok());
}

}  // namespace
}  // namespace delayd::http
