#include "common/json_text.h"

#include <gtest/gtest.h>

namespace delayd {
namespace {

std::string Nested(int depth, std::string_view inside = "1") {
  return std::string(depth, '[') + std::string(inside) + std::string(depth, ']');
}

TEST(JsonTextTest, ParsesUpToTheDepthLimit) {
  Result<nlohmann::json> ok = ParseJson(Nested(kMaxJsonDepth));
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_TRUE(ok->is_array());
}

TEST(JsonTextTest, RefusesDeeperNestingAndNamesTheField) {
  Result<nlohmann::json> deep = ParseJson(Nested(kMaxJsonDepth + 1));
  ASSERT_FALSE(deep.ok());
  EXPECT_EQ(deep.status().code(), StatusCode::kInvalidArgument);
  // The request that crashed the server: 70,000 levels inside "body".
  const std::string attack = "{\"body\":" + Nested(70'000, "") + "}";
  Result<nlohmann::json> r = ParseJson(attack);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().field(), "body");
  r = ParseJson("[{\"a\":1},{\"key\":\"k\",\"body\":{\"x\":" + Nested(200) + "}}]");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().field(), "[1].body.x");
  r = ParseJson("{\"template\":{\"body\":" + Nested(200) + "}}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().field(), "template.body");
}

TEST(JsonTextTest, BracketsInsideStringsDoNotCount) {
  const std::string text = "{\"s\":\"" + std::string(1000, '[') + "\\\"" + "\"}";
  Result<nlohmann::json> r = ParseJson(text);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)["s"].get<std::string>().size(), 1001u);
}

TEST(JsonTextTest, InvalidJsonNamesTheGivenField) {
  for (const char* bad : {"", "{", "{\"a\":}", "[1,]", "\"\xff\"", "{\"a\":1}x"}) {
    Result<nlohmann::json> r = ParseJson(bad, "spec");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().field(), "spec");
  }
}

TEST(JsonTextTest, MemberTextIsTheSourceTextExactly) {
  const std::string text =
      " { \"key\" : \"k\" ,\n \"body\" :\t{\"z\":1,\"a\":12345678901234567890123,\"e\":1E2} , "
      "\"n\":-0.0e-0}";
  ASSERT_TRUE(ParseJson(text).ok());
  EXPECT_EQ(JsonMemberText(text, "body"), "{\"z\":1,\"a\":12345678901234567890123,\"e\":1E2}");
  EXPECT_EQ(JsonMemberText(text, "key"), "\"k\"");
  EXPECT_EQ(JsonMemberText(text, "n"), "-0.0e-0");
  EXPECT_EQ(JsonMemberText(text, "absent"), std::nullopt);
  EXPECT_EQ(JsonMemberText("[1]", "body"), std::nullopt);
}

TEST(JsonTextTest, MemberTextHandlesEscapesAndRepeatedKeys) {
  const std::string text =
      R"({"b\u006fdy":"first","x":"a \"}\" ] [","body":["}",{"q":"\\"}],"y":true})";
  ASSERT_TRUE(ParseJson(text).ok());
  // nlohmann keeps the last of repeated keys; so does the text view.
  EXPECT_EQ(JsonMemberText(text, "body"), R"(["}",{"q":"\\"}])");
  EXPECT_EQ(JsonMemberText(text, "x"), R"("a \"}\" ] [")");
  EXPECT_EQ(JsonMemberText(text, "y"), "true");
  const std::string only_escaped = R"({"b\u006fdy":7})";
  EXPECT_EQ(JsonMemberText(only_escaped, "body"), "7");
}

TEST(JsonTextTest, ElementTextsOfAnArray) {
  const std::string text = R"([ {"body":1.50} ,"s,]",[[]], 18446744073709551616 ,null])";
  ASSERT_TRUE(ParseJson(text).ok());
  std::vector<std::string_view> e = JsonElementTexts(text);
  ASSERT_EQ(e.size(), 5u);
  EXPECT_EQ(e[0], R"({"body":1.50})");
  EXPECT_EQ(e[1], R"("s,]")");
  EXPECT_EQ(e[2], "[[]]");
  EXPECT_EQ(e[3], "18446744073709551616");
  EXPECT_EQ(e[4], "null");
  EXPECT_TRUE(JsonElementTexts("[]").empty());
  EXPECT_TRUE(JsonElementTexts("{\"a\":1}").empty());
}

}  // namespace
}  // namespace delayd
