#include "common/json_writer.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace delayd {
namespace {

using nlohmann::json;

TEST(JsonWriterTest, NestsAndSeparates) {
  std::string out;
  JsonWriter w(out);
  w.BeginObject();
  w.Key("id").Uint(18446744073709551615ULL);
  w.Key("n").Int(-42);
  w.Key("ok").Bool(true);
  w.Key("none").Null();
  w.Key("list")
      .BeginArray()
      .String("a")
      .BeginObject()
      .EndObject()
      .BeginArray()
      .EndArray()
      .EndArray();
  w.Key("raw").Raw(R"({"x":[1,2]})");
  w.Key("at").Time(1'795'306'980'455);
  w.EndObject();
  EXPECT_EQ(out, R"({"id":18446744073709551615,"n":-42,"ok":true,"none":null,"list":["a",{},[]],)"
                 R"("raw":{"x":[1,2]},"at":"2026-11-22T00:23:00.455Z"})");
  EXPECT_TRUE(json::accept(out));
}

TEST(JsonWriterTest, DoublesReadBackExactlyAndStayDoubles) {
  for (double v : {2.0, 0.1, 1e300, -3.5, 1.0 / 3}) {
    std::string out;
    JsonWriter(out).Double(v);
    json j = json::parse(out);
    EXPECT_TRUE(j.is_number_float()) << out;
    EXPECT_EQ(j.get<double>(), v) << out;
  }
  std::string out;
  JsonWriter(out).Double(std::nan(""));
  EXPECT_EQ(out, "null");
}

TEST(JsonWriterTest, EscapesLikeJsonRequires) {
  const std::string tricky = std::string("q\"b\\n\n\r\t\x01\x1f") + std::string(1, '\0') + "é€😀";
  std::string out;
  AppendJsonString(out, tricky);
  EXPECT_EQ(out, R"("q\"b\\n\n\r\t\u0001\u001f\u0000é€😀")");
  EXPECT_EQ(json::parse(out).get<std::string>(), tricky);
}

TEST(JsonWriterTest, ReplacesBytesThatAreNotUtf8) {
  // A lone continuation byte, a truncated sequence, an overlong '/', a
  // surrogate half and a code point past U+10FFFF: each byte becomes U+FFFD.
  for (const std::string bad :
       {"\x80", "\xE2\x82", "\xC0\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80"}) {
    std::string out;
    AppendJsonString(out, "a" + bad + "b");
    ASSERT_TRUE(json::accept(out)) << out;
    std::string back = json::parse(out).get<std::string>();
    EXPECT_EQ(back.front(), 'a');
    EXPECT_EQ(back.back(), 'b');
    EXPECT_NE(back.find("\xEF\xBF\xBD"), std::string::npos);
    EXPECT_EQ(back.find(bad), std::string::npos);
  }
}

}  // namespace
}  // namespace delayd
