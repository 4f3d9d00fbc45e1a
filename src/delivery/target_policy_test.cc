#include "delivery/target_policy.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>

namespace delayd::delivery {
namespace {

TargetPolicy Policy(std::vector<std::string> allow, std::vector<std::string> deny) {
  Result<TargetPolicy> p = TargetPolicy::Make(allow, deny);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? *p : TargetPolicy();
}

sockaddr_storage Addr(const char* ip, uint16_t port) {
  sockaddr_storage ss{};
  auto* v4 = reinterpret_cast<sockaddr_in*>(&ss);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (inet_pton(AF_INET, ip, &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
  } else {
    EXPECT_EQ(inet_pton(AF_INET6, ip, &v6->sin6_addr), 1) << ip;
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
  }
  return ss;
}

bool Connects(const TargetPolicy& p, const char* host, const char* ip, uint16_t port) {
  sockaddr_storage ss = Addr(ip, port);
  return p.CheckAddress(host, reinterpret_cast<sockaddr*>(&ss)).ok();
}

TEST(TargetPolicyTest, TheDefaultDeniesLinkLocalAndUnspecifiedOnly) {
  TargetPolicy p;
  for (const char* url :
       {"http://169.254.169.254/latest/meta-data", "http://[fe80::1]:8080/", "http://0.0.0.0/",
        "http://[::]/", "http://[::ffff:169.254.169.254]/", "http://0xa9.0xfe.0xa9.0xfe/"}) {
    Status s = p.CheckUrl(url);
    EXPECT_FALSE(s.ok()) << url;
    EXPECT_NE(s.message().find("built-in"), std::string::npos) << s.message();
  }
  for (const char* url : {"http://127.0.0.1:8080/hook", "https://hooks.example.com/x",
                          "http://10.1.2.3/", "http://[::1]:9/"}) {
    EXPECT_TRUE(p.CheckUrl(url).ok()) << url;
  }
  // A name is judged by its address when the connection is made.
  EXPECT_FALSE(Connects(p, "metadata.internal", "169.254.169.254", 80));
  EXPECT_FALSE(Connects(p, "rebound.example", "::ffff:169.254.1.1", 80));
  EXPECT_TRUE(Connects(p, "localhost", "127.0.0.1", 80));
}

TEST(TargetPolicyTest, DenyRulesByAddressNameSuffixAndPort) {
  TargetPolicy p =
      Policy({}, {"127.0.0.0/8", "[::1]", "*.corp.example", "db.example:5432", "*:25"});
  EXPECT_FALSE(p.CheckUrl("http://127.0.0.2:8080/").ok());
  EXPECT_FALSE(p.CheckUrl("http://[::1]/").ok());
  EXPECT_FALSE(p.CheckUrl("http://A.Corp.Example./x").ok()) << "case and a final dot";
  EXPECT_TRUE(p.CheckUrl("http://corp.example/").ok()) << "*.domain is its subdomains only";
  EXPECT_FALSE(p.CheckUrl("http://db.example:5432/").ok());
  EXPECT_TRUE(p.CheckUrl("http://db.example/").ok());
  EXPECT_FALSE(p.CheckUrl("http://mail.example:25/").ok());
  // A name passes the URL check and is stopped at connection by its address.
  EXPECT_TRUE(p.CheckUrl("http://localhost:8080/").ok());
  EXPECT_FALSE(Connects(p, "localhost", "127.0.0.1", 8080));
  EXPECT_NE(p.CheckUrl("http://127.0.0.1/").message().find("--target-deny 127.0.0.0/8"),
            std::string::npos);
}

TEST(TargetPolicyTest, GrpcTargetsAreJudgedByTheSameRules) {
  TargetPolicy p = Policy({}, {"127.0.0.0/8", "*.corp.example", "db.example:5432"});
  EXPECT_FALSE(p.CheckUrl("grpc://127.0.0.3:50051").ok());
  EXPECT_FALSE(p.CheckUrl("grpcs://Svc.Corp.Example:443/").ok());
  EXPECT_FALSE(p.CheckUrl("grpc://db.example:5432").ok());
  EXPECT_TRUE(p.CheckUrl("grpc://db.example:5433").ok());
  EXPECT_FALSE(TargetPolicy().CheckUrl("grpc://[fe80::1]:50051").ok()) << "built-in deny";
  EXPECT_FALSE(p.CheckUrl("grpc://no-port.example").ok()) << "unreadable";
  EXPECT_EQ(TargetPolicy::HostOf("grpc://[::1]:9"), "::1");
}

TEST(TargetPolicyTest, AllowRulesAdmitOnlyWhatTheyMatch) {
  // Name rules judge names at submission.
  TargetPolicy names = Policy({"hooks.example.com:443", "*.svc.example"}, {});
  EXPECT_TRUE(names.CheckUrl("https://hooks.example.com/x").ok());
  EXPECT_FALSE(names.CheckUrl("http://hooks.example.com/x").ok()) << "port 80 is not 443";
  EXPECT_FALSE(names.CheckUrl("https://evil.example.com/").ok());
  EXPECT_TRUE(names.CheckUrl("http://a.svc.example:81/").ok());
  EXPECT_FALSE(names.CheckUrl("http://10.1.2.3/").ok());
  EXPECT_NE(names.CheckUrl("http://10.1.2.3/").message().find("no --target-allow"),
            std::string::npos);

  TargetPolicy p =
      Policy({"hooks.example.com:443", "10.0.0.0/8", "[fd00::]/8:8443"}, {"10.9.0.0/16"});
  EXPECT_TRUE(p.CheckUrl("http://10.1.2.3/").ok());
  EXPECT_FALSE(p.CheckUrl("http://192.168.1.1/").ok());
  EXPECT_FALSE(p.CheckUrl("http://10.9.1.1/").ok()) << "deny wins over allow";
  EXPECT_TRUE(p.CheckUrl("https://[fd12::1]:8443/").ok());
  EXPECT_FALSE(p.CheckUrl("https://[fe00::1]:8443/").ok());
  // An address rule cannot judge a name before DNS: the connection does.
  EXPECT_TRUE(p.CheckUrl("http://internal.example/").ok());
  EXPECT_TRUE(Connects(p, "internal.example", "10.0.0.7", 80));
  EXPECT_FALSE(Connects(p, "internal.example", "192.168.1.1", 80));
  EXPECT_FALSE(Connects(p, "hooks.example.com", "10.9.0.1", 443));
}

TEST(TargetPolicyTest, UnreadableRulesAreRefusedNamingThem) {
  for (const char* bad : {"", "10.0.0.0/33", "[fd00::/8", "host:0", "host:99999", "a b", "::1/129",
                          "nothost/8", "[::1]x"}) {
    Result<TargetPolicy> p = TargetPolicy::Make({bad}, {});
    ASSERT_FALSE(p.ok()) << bad;
    EXPECT_NE(p.status().message().find(std::string("'") + bad + "'"), std::string::npos)
        << p.status().message();
  }
  EXPECT_FALSE(TargetPolicy().CheckUrl("not a url").ok());
}

}  // namespace
}  // namespace delayd::delivery
