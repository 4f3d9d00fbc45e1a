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
  for (std::string bad :
       {std::string(""), std::string("{"), std::string("{\"a\":}"), std::string("[1,]"),
        std::string("\"\xff\""), std::string("{\"a\":1}x"), std::string("{\"a\":1}\0x", 9)}) {
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
  // ParseJson refuses a repeated key; the text view, given one anyway,
  // reads the last, as nlohmann would.
  EXPECT_EQ(ParseJson(text).status().field(), "body");
  EXPECT_EQ(JsonMemberText(text, "body"), R"(["}",{"q":"\\"}])");
  EXPECT_EQ(JsonMemberText(text, "x"), R"("a \"}\" ] [")");
  EXPECT_EQ(JsonMemberText(text, "y"), "true");
  const std::string only_escaped = R"({"b\u006fdy":7})";
  EXPECT_EQ(JsonMemberText(only_escaped, "body"), "7");
}

TEST(JsonTextTest, AMemberGivenTwiceIsRefusedNamingIt) {
  EXPECT_TRUE(ParseJson(R"({"a":1,"b":{"a":2},"c":[{"a":3},{"a":4}]})").ok());
  for (auto [text, field] : std::vector<std::pair<const char*, const char*>>{
           {R"({"delay":1,"delay":2})", "delay"},
           {R"({"target":{"url":"x","headers":{},"url":"y"}})", "target.url"},
           {R"([{"a":1},{"a":1,"a":1}])", "a"},
           {R"({"key":1,"key":2})", "key"},
           {R"({"body":{"x":{"y":1,"y":2}}})", "body.x.y"}}) {
    Result<nlohmann::json> r = ParseJson(text);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().field(), field) << text;
    EXPECT_NE(r.status().message().find("twice"), std::string::npos);
  }
  EXPECT_EQ(ParseJson(R"({"a":1,"a":2})", "definition").status().field(), "definition.a");
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

JsonFieldTest Field(std::vector<std::string> path, std::optional<std::string> value) {
  return JsonFieldTest{std::move(path), std::move(value)};
}

TEST(JsonFieldTest, ComparesStringsByContentAndOtherScalarsAsWritten) {
  const std::string body = R"({"customer":{"id":8812,"name":"Zo\u00eb","vip":true,"tag":null},)"
                           R"("items":[{"sku":"A-1"},{"sku":"B-2","qty":2.50}],"note":"a.b"})";
  EXPECT_TRUE(Field({"customer", "id"}, "8812").Matches(body));
  EXPECT_FALSE(Field({"customer", "id"}, "8813").Matches(body));
  EXPECT_FALSE(Field({"customer", "id"}, "\"8812\"").Matches(body));
  EXPECT_TRUE(Field({"customer", "name"}, "Zo\u00eb").Matches(body));  // decoded: ë
  EXPECT_FALSE(Field({"customer", "name"}, "Zo\\u00eb").Matches(body));
  EXPECT_TRUE(Field({"customer", "vip"}, "true").Matches(body));
  EXPECT_TRUE(Field({"customer", "tag"}, "null").Matches(body));
  EXPECT_TRUE(Field({"items", "1", "sku"}, "B-2").Matches(body));
  EXPECT_TRUE(Field({"items", "1", "qty"}, "2.50").Matches(body));  // as written, not 2.5
  EXPECT_FALSE(Field({"items", "1", "qty"}, "2.5").Matches(body));
  EXPECT_FALSE(Field({"items", "2", "sku"}, "B-2").Matches(body));
  EXPECT_FALSE(Field({"items", "x"}, std::nullopt).Matches(body));
  EXPECT_TRUE(Field({"note"}, "a.b").Matches(body));
  // An object or array equals no value, but exists.
  EXPECT_FALSE(Field({"customer"}, R"({"id":8812})").Matches(body));
  EXPECT_TRUE(Field({"customer"}, std::nullopt).Matches(body));
  EXPECT_TRUE(Field({"items", "0"}, std::nullopt).Matches(body));
  EXPECT_FALSE(Field({"customer", "email"}, std::nullopt).Matches(body));
  EXPECT_FALSE(Field({"customer", "id", "x"}, std::nullopt).Matches(body));
  EXPECT_TRUE(Field({"0"}, "7").Matches("[7]"));
}

TEST(JsonFieldTest, ABodyThatIsNotJsonNeverMatches) {
  for (std::string bad : {std::string(""), std::string("order 8812"), std::string("{\"id\":1"),
                          std::string("{\"id\":\"\xff\"}"), std::string("\0\x01\x02", 3),
                          "{\"id\":1}" + std::string(1, '\0')}) {
    EXPECT_FALSE(Field({"id"}, std::nullopt).Matches(bad)) << bad;
  }
  // Nesting far past what ParseJson accepts is still only a miss.
  const std::string deep = "{\"a\":" + Nested(100'000) + "}";
  EXPECT_TRUE(Field({"a", "0"}, std::nullopt).Matches(deep));
  EXPECT_FALSE(Field({"a", "1"}, std::nullopt).Matches(deep));
}

TEST(JsonFieldTest, PathsSplitAtDotsWithinBounds) {
  auto p = ParseJsonPath("items.0.sku", "body_field");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, (std::vector<std::string>{"items", "0", "sku"}));
  for (std::string bad : {std::string(""), std::string("a..b"), std::string(".a"),
                          std::string("a."), std::string(kMaxJsonPathBytes + 1, 'a')}) {
    auto r = ParseJsonPath(bad, "body_field");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().field(), "body_field");
  }
  std::string many = "a";
  for (size_t i = 0; i < kMaxJsonPathSegments; ++i) many += ".a";
  EXPECT_FALSE(ParseJsonPath(many, "body_field").ok());
  EXPECT_TRUE(ParseJsonPath(many.substr(2), "body_field").ok());
}

}  // namespace
}  // namespace delayd
