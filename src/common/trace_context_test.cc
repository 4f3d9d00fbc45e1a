#include "common/trace_context.h"

#include <gtest/gtest.h>

#include <set>

namespace delayd {
namespace {

constexpr const char* kValid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

TEST(TraceparentTest, ReadsTheSpecsExample) {
  auto tp = ParseTraceparent(kValid);
  ASSERT_TRUE(tp);
  EXPECT_EQ(tp->trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(tp->parent_id, "00f067aa0ba902b7");
  EXPECT_EQ(tp->flags, 1);
  EXPECT_EQ(FormatTraceparent(*tp), kValid);
  tp = ParseTraceparent(" \t00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-ff\t");
  ASSERT_TRUE(tp) << "optional white space around the value";
  EXPECT_EQ(tp->flags, 0xff) << "flags unknown today are kept";
}

TEST(TraceparentTest, RefusesWhatTheRulesRefuse) {
  for (const char* bad : {
           "",
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0",     // short
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",   // 00 is 55 exactly
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",  // ... even with fields
           "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",    // version ff
           "0g-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",    // version not hex
           "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",    // upper case
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00F067AA0BA902B7-01",
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0A",
           "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  // all-zero trace id
           "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  // all-zero parent id
           "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  // separators
           "00-4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7-01",
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7_01",
           "00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01",  // a field one short
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01,"
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",       // two headers joined
           "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01.what",  // later: '-' next
       }) {
    EXPECT_FALSE(ParseTraceparent(bad)) << bad;
  }
}

TEST(TraceparentTest, ALaterVersionIsReadForItsFirstFields) {
  auto tp =
      ParseTraceparent("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-the-future");
  ASSERT_TRUE(tp);
  EXPECT_EQ(tp->trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(FormatTraceparent(*tp), kValid) << "sent on as version 00";
  EXPECT_TRUE(ParseTraceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"));
}

TEST(TracestateTest, KeepsValidMembersWithoutOptionalSpace) {
  EXPECT_EQ(ParseTracestate("rojo=00f067aa0ba902b7, congo=t61rcWkgMzE"),
            "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE");
  EXPECT_EQ(ParseTracestate(" ,a=1,\t, b=x y ,"), "a=1,b=x y") << "empty members dropped";
  EXPECT_EQ(ParseTracestate("a=x ,b=1"), "a=x,b=1") << "a space before ',' is the list's";
  EXPECT_EQ(ParseTracestate(""), "");
  EXPECT_EQ(ParseTracestate("tenant1@vendor=v,0tenant@sys-1=w,k_-*/9=!~"),
            "tenant1@vendor=v,0tenant@sys-1=w,k_-*/9=!~");
  std::string most;
  for (int i = 0; i < 32; ++i) most += (i ? ",k" : "k") + std::to_string(i) + "=v";
  EXPECT_EQ(ParseTracestate(most), most);
  EXPECT_EQ(ParseTracestate("k=" + std::string(256, 'v')), "k=" + std::string(256, 'v'));
}

TEST(TracestateTest, DropsTheWholeHeaderForOneBadMember) {
  std::string too_many;
  for (int i = 0; i < 33; ++i) too_many += (i ? ",k" : "k") + std::to_string(i) + "=v";
  for (const std::string& bad : {
           too_many,
           std::string("a=1,a=2"),                    // a key twice
           std::string("Upper=1"),                    // keys are lower case
           std::string("1abc=1"),                     // and start with a letter
           std::string("a=1,b"),                      // no '='
           std::string("a="),                         // empty value
           std::string("a=b=c"),                      // '=' in a value
           std::string("a=\x7f"),                     // not printable
           std::string("t@=1"), std::string("@s=1"),  // empty tenant or system
           std::string("t@Sys=1"),                    // system upper case
           std::string("t@abcdefghijklmno=1"),        // system over 14
           "k=" + std::string(257, 'v'),              // value over 256
           std::string(257, 'k') + "=v",              // key over 256
       }) {
    EXPECT_FALSE(ParseTracestate(bad)) << bad;
  }
}

TEST(TraceparentTest, NewParentIdsAreHexAndDiffer) {
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) {
    const std::string id = NewParentId();
    ASSERT_EQ(id.size(), 16u);
    ASSERT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos) << id;
    ASSERT_NE(id, "0000000000000000");
    seen.insert(id);
  }
  EXPECT_EQ(seen.size(), 1000u);
}

}  // namespace
}  // namespace delayd
