#include "common/json_text.h"

#include <charconv>
#include <set>

namespace delayd {
namespace {

using nlohmann::json;

// nlohmann's parser stops at a NUL byte as at the end of the text, so that
// "{}\0junk" would parse; no JSON text holds one.
bool IsJsonText(std::string_view t) { return t.find('\0') == t.npos; }

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

size_t SkipSpace(std::string_view t, size_t i) {
  while (i < t.size() && IsSpace(t[i])) ++i;
  return i;
}

// `i` at an opening quote: the index of the closing one (or t.size()).
size_t StringEnd(std::string_view t, size_t i) {
  for (++i; i < t.size() && t[i] != '"'; ++i) {
    if (t[i] == '\\') ++i;
  }
  return std::min(i, t.size());
}

// `i` at the first byte of a value: the index just past it.
size_t ValueEnd(std::string_view t, size_t i) {
  if (i >= t.size()) return i;
  if (t[i] == '"') return StringEnd(t, i) + 1;
  if (t[i] == '{' || t[i] == '[') {
    int depth = 0;
    for (; i < t.size(); ++i) {
      const char c = t[i];
      if (c == '"') {
        i = StringEnd(t, i);
      } else if (c == '{' || c == '[') {
        ++depth;
      } else if ((c == '}' || c == ']') && --depth == 0) {
        return i + 1;
      }
    }
    return i;
  }
  while (i < t.size() && !IsSpace(t[i]) && t[i] != ',' && t[i] != '}' && t[i] != ']') ++i;
  return i;
}

// The text of a key as it reads (escapes decoded).
std::string KeyText(std::string_view raw) {
  if (raw.find('\\') == raw.npos) return std::string(raw);
  json k = json::parse("\"" + std::string(raw) + "\"", nullptr, false);
  return k.is_string() ? k.get<std::string>() : std::string(raw);
}

// Calls fn(raw key or "", value text) for each child of the container that
// `t` holds; nothing when `t` is not an `open` container.
template <typename Fn>
void ForEachChild(std::string_view t, char open, Fn fn) {
  size_t i = SkipSpace(t, 0);
  if (i >= t.size() || t[i] != open) return;
  for (i = SkipSpace(t, i + 1); i < t.size() && t[i] != '}' && t[i] != ']';) {
    std::string_view key;
    if (open == '{') {
      const size_t end = StringEnd(t, i);
      key = t.substr(i + 1, end - i - 1);
      i = SkipSpace(t, SkipSpace(t, end + 1) + 1);  // past the ':'
    }
    const size_t end = ValueEnd(t, i);
    fn(key, t.substr(i, end - i));
    i = SkipSpace(t, end);
    if (i < t.size() && t[i] == ',') i = SkipSpace(t, i + 1);
  }
}

// One open container while checking depth: where we are in it, for the path
// of an error.
struct Frame {
  bool object;
  bool expect_key;
  size_t index;
  std::string_view key;
};

// The field an error names for a value nested too deep: the keys from the top
// (and the index of a top-level array), at most three of them.
std::string DeepPath(const std::vector<Frame>& frames, const std::string& field) {
  std::string path;
  for (size_t k = 0; k < frames.size() && k < 3; ++k) {
    const Frame& f = frames[k];
    if (f.object) {
      path += (path.empty() ? "" : ".") + KeyText(f.key);
    } else if (k == 0) {
      path += "[" + std::to_string(f.index) + "]";
    } else {
      break;
    }
  }
  return path.empty() ? field : path;
}

}  // namespace

Result<json> ParseJson(std::string_view text, const std::string& field) {
  std::vector<Frame> frames;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '"') {
      const size_t end = StringEnd(text, i);
      if (!frames.empty() && frames.back().expect_key) {
        frames.back().key = text.substr(i + 1, end - i - 1);
        frames.back().expect_key = false;
      }
      i = end;
    } else if (c == '{' || c == '[') {
      if (frames.size() >= static_cast<size_t>(kMaxJsonDepth)) {
        return Status::InvalidField(
            DeepPath(frames, field),
            "nests arrays and objects deeper than " + std::to_string(kMaxJsonDepth) + " levels");
      }
      frames.push_back({c == '{', c == '{', 0, {}});
    } else if ((c == '}' || c == ']') && !frames.empty()) {
      frames.pop_back();
    } else if (c == ',' && !frames.empty()) {
      Frame& f = frames.back();
      f.object ? void(f.expect_key = true) : void(++f.index);
    }
  }
  // Each object's member names so far, to refuse a name given twice: RFC
  // 8259 leaves such a document's meaning open, and a proxy that reads the
  // first would see another request than delayd, which would keep the last.
  struct Open {
    bool object;
    std::string key;  // the member being read
    std::set<std::string> keys;
  };
  std::vector<Open> open;
  std::optional<std::string> duplicate;
  json::parser_callback_t track = [&](int, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
        open.push_back({true, {}, {}});
        break;
      case json::parse_event_t::array_start:
        open.push_back({false, {}, {}});
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        if (!open.empty()) open.pop_back();
        break;
      case json::parse_event_t::key:
        if (!open.empty() && open.back().object) {
          std::string name = parsed.get<std::string>();
          if (!open.back().keys.insert(name).second && !duplicate) {
            std::string path;
            for (const Open& o : open) {
              if (&o == &open.back()) break;
              if (o.object) path += o.key + ".";
            }
            duplicate = path + name;
          }
          open.back().key = std::move(name);
        }
        break;
      case json::parse_event_t::value:
        break;
    }
    return true;
  };
  json j = IsJsonText(text) ? json::parse(text.begin(), text.end(), track, false)
                            : json(json::value_t::discarded);
  if (j.is_discarded()) return Status::InvalidField(field, "is not valid JSON");
  if (duplicate) {
    return Status::InvalidField(field == "body" ? *duplicate : field + "." + *duplicate,
                                "is given twice; each member of an object may appear once");
  }
  return j;
}

std::optional<std::string_view> JsonMemberText(std::string_view text, std::string_view key) {
  std::optional<std::string_view> found;
  ForEachChild(text, '{', [&](std::string_view k, std::string_view value) {
    if (k.find('\\') == k.npos ? k == key : KeyText(k) == key) found = value;
  });
  return found;
}

std::vector<std::string_view> JsonElementTexts(std::string_view text) {
  std::vector<std::string_view> out;
  ForEachChild(text, '[', [&](std::string_view, std::string_view value) { out.push_back(value); });
  return out;
}

namespace {

// REQUIRES: `text` is valid JSON. The source text of the child `segment` of
// the object or array `text`.
std::optional<std::string_view> ChildText(std::string_view text, const std::string& segment) {
  const size_t start = SkipSpace(text, 0);
  if (start < text.size() && text[start] == '{') return JsonMemberText(text, segment);
  size_t index = 0;
  auto [p, ec] = std::from_chars(segment.data(), segment.data() + segment.size(), index);
  if (ec != std::errc() || p != segment.data() + segment.size()) return std::nullopt;
  std::optional<std::string_view> found;
  size_t i = 0;
  ForEachChild(text, '[', [&](std::string_view, std::string_view value) {
    if (i++ == index) found = value;
  });
  return found;
}

}  // namespace

bool JsonFieldTest::Matches(std::string_view text) const {
  // accept() parses without building a document, and without recursion.
  if (!IsJsonText(text) || !json::accept(text.begin(), text.end())) return false;
  std::string_view field = text;
  for (const std::string& segment : path) {
    auto child = ChildText(field, segment);
    if (!child) return false;
    field = *child;
  }
  if (!value) return true;
  if (field.empty() || field.front() == '{' || field.front() == '[') return false;
  if (field.front() != '"') return field == *value;
  if (field.find('\\') == field.npos) return field.substr(1, field.size() - 2) == *value;
  json s = json::parse(field.begin(), field.end(), nullptr, false);
  return s.is_string() && s.get_ref<const std::string&>() == *value;
}

Result<std::vector<std::string>> ParseJsonPath(std::string_view dotted, const std::string& field) {
  if (dotted.empty() || dotted.size() > kMaxJsonPathBytes) {
    return Status::InvalidField(field, "must be a path of 1-" + std::to_string(kMaxJsonPathBytes) +
                                           " bytes, like customer.id or items.0.sku");
  }
  std::vector<std::string> out;
  for (size_t start = 0;;) {
    const size_t dot = std::min(dotted.find('.', start), dotted.size());
    if (dot == start) {
      return Status::InvalidField(field,
                                  "has an empty segment: each part between dots names a "
                                  "member, or (digits) an array element");
    }
    out.emplace_back(dotted.substr(start, dot - start));
    if (out.size() > kMaxJsonPathSegments) {
      return Status::InvalidField(
          field, "has more than " + std::to_string(kMaxJsonPathSegments) + " segments");
    }
    if (dot == dotted.size()) return out;
    start = dot + 1;
  }
}

}  // namespace delayd
