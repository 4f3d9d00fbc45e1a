// JSON as text, for what nlohmann's DOM cannot do safely or at all:
//
// - ParseJson bounds the nesting depth before parsing. nlohmann's parser is
//   iterative, but copying, comparing and dumping a document recurse once per
//   level, so 70,000 nested brackets in a 140 KB request would exhaust the
//   stack. Every JSON that delayd reads (requests, stored specs, timer
//   definitions, attempt logs) goes through ParseJson.
// - JsonMemberText and JsonElementTexts give the exact source text of a value,
//   so a job body submitted as JSON is stored and delivered byte for byte:
//   a DOM would sort its keys and round its numbers through a double.
//
// Both walk the text with a loop and an explicit depth count, never recursion.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace delayd {

// The deepest nesting of arrays and objects accepted anywhere: serde_json's
// default. A document nested deeper is refused before it is parsed.
inline constexpr int kMaxJsonDepth = 128;

// Parses `text` as one JSON document. Errors are kInvalidArgument with a
// field: `field` ("body") when the text is not JSON, or the path to the value
// that nests too deep ("body", "[3].body", "template.body").
Result<nlohmann::json> ParseJson(std::string_view text, const std::string& field = "body");

// REQUIRES: `text` is valid JSON (ParseJson accepted it).
// The source text of member `key` of the object `text`, white space around it
// trimmed (the last one when the key repeats, as nlohmann keeps the last);
// nullopt when `text` is not an object or has no such member.
std::optional<std::string_view> JsonMemberText(std::string_view text, std::string_view key);
// REQUIRES: `text` is valid JSON. The source text of each element of the
// array `text`; empty when it is not an array.
std::vector<std::string_view> JsonElementTexts(std::string_view text);

// A test of one field of a JSON document, as job search filters by a field
// of the body. The field is reached by `path`: each segment names a member of
// an object, or (all digits) an element of an array. With a `value`, the
// field must be a string whose content (escapes decoded) is `value`, or a
// number, true, false or null written exactly as `value`; an object or an
// array never equals a value. Without one, the field only has to exist.
// A text that is not valid JSON (any bytes may be a body) never matches.
struct JsonFieldTest {
  std::vector<std::string> path;
  std::optional<std::string> value;

  bool Matches(std::string_view text) const;
};

inline constexpr size_t kMaxJsonPathSegments = 32;
inline constexpr size_t kMaxJsonPathBytes = 512;

// Splits a dotted path ("customer.id", "items.0.sku") into its segments.
// Errors (kInvalidArgument naming `field`): empty, an empty segment, more
// than kMaxJsonPathSegments segments or kMaxJsonPathBytes bytes.
Result<std::vector<std::string>> ParseJsonPath(std::string_view dotted, const std::string& field);

}  // namespace delayd
