// Writes JSON text straight into a string, without building a document first.
// The hot replies (jobs, batches of jobs) use it: nlohmann::json's DOM costs
// an allocation per value, and the submit benchmark spent most of its event
// loop there. Commas are placed by the writer; the caller nests correctly.
//
//   JsonWriter w(out);
//   w.BeginObject();
//   w.Key("id").Uint(7);
//   w.Key("tags").BeginArray().String("a").EndArray();
//   w.EndObject();
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace delayd {

class JsonWriter {
 public:
  explicit JsonWriter(std::string& out) : out_(out) {}

  JsonWriter& BeginObject() { return Open('{'); }
  JsonWriter& EndObject() { return Close('}'); }
  JsonWriter& BeginArray() { return Open('['); }
  JsonWriter& EndArray() { return Close(']'); }
  JsonWriter& Key(std::string_view name);
  // Text, escaped; bytes that are not UTF-8 become U+FFFD.
  JsonWriter& String(std::string_view s);
  JsonWriter& Int(int64_t v);
  JsonWriter& Uint(uint64_t v);
  // Shortest text that reads back as the same double; NaN and infinities are null.
  JsonWriter& Double(double v);
  JsonWriter& Bool(bool v);
  JsonWriter& Null();
  // A value that is JSON text already; the caller vouches for it.
  JsonWriter& Raw(std::string_view json);
  // An RFC 3339 time with milliseconds, as a string.
  JsonWriter& Time(int64_t wall_ms);

 private:
  JsonWriter& Open(char bracket);
  JsonWriter& Close(char bracket);
  void Separate();

  std::string& out_;
  std::vector<bool> first_;  // per open container: no member written yet
  bool after_key_ = false;
};

// `s` as a JSON string literal, quotes included.
void AppendJsonString(std::string& out, std::string_view s);

}  // namespace delayd
