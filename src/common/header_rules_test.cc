#include "common/header_rules.h"

#include <gtest/gtest.h>

namespace delayd {
namespace {

TEST(HeaderRulesTest, FramingHopByHopAndDelaydHeadersAreRefusedInAnyCase) {
  for (const char* name :
       {"Content-Length", "content-length", "Transfer-Encoding", "CONNECTION", "Keep-Alive",
        "Upgrade", "TE", "te", "Trailer", "Host", "Expect", "Proxy-Authorization",
        "proxy-connection", "Delayd-Signature", "delayd-job-id", "Delayd-Anything"}) {
    EXPECT_NE(TargetHeaderFault(name, "x"), "") << name;
  }
}

TEST(HeaderRulesTest, NamesMustBeTokensAndValuesCarryNoControlCharacters) {
  for (const char* name : {"", "a b", "a:b", "a\r\nb", "(x)", "x\x7f", "\xc3\xa9"}) {
    EXPECT_NE(TargetHeaderFault(name, "x"), "") << name;
  }
  for (const char* value : {"a\rb", "a\nb", "a\x7f"}) {
    EXPECT_NE(TargetHeaderFault("X-A", value), "") << value;
  }
  EXPECT_NE(TargetHeaderFault("X-A", std::string_view("a\0b", 3)), "");
}

TEST(HeaderRulesTest, OrdinaryHeadersPass) {
  for (const char* name : {"X-Trace", "Authorization", "Content-Type", "Accept", "X-Delayd",
                           "My-Delayd-Thing", "x!#$%&'*+-.^_`|~1"}) {
    EXPECT_EQ(TargetHeaderFault(name, "value with\ttab and \xc3\xa9"), "") << name;
  }
}

}  // namespace
}  // namespace delayd
