#include "rpc/transcode.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <nlohmann/json.hpp>

#include "common/base64.h"
#include "common/json_text.h"
#include "common/json_writer.h"
#include "common/time_format.h"
#include "delayd/v1/jobs.pb.h"

namespace delayd::rpc {

namespace pb = google::protobuf;
namespace v1 = delayd::v1;
using FD = pb::FieldDescriptor;
using nlohmann::json;

namespace {

// Seconds of 0001-01-01 and 9999-12-31T23:59:59, proto3 JSON's range.
constexpr int64_t kMinSeconds = -62'135'596'800;
constexpr int64_t kMaxSeconds = 253'402'300'799;

// The enum's prefix: its zero value's name without "UNSPECIFIED".
std::string EnumPrefix(const pb::EnumDescriptor* e) {
  std::string zero = e->value(0)->name();
  const size_t at = zero.rfind("UNSPECIFIED");
  return at == std::string::npos ? "" : zero.substr(0, at);
}

Result<std::string> EnumName(const FD* f, int value, const std::string& field) {
  const pb::EnumValueDescriptor* v = f->enum_type()->FindValueByNumber(value);
  if (v == nullptr || value == 0) {
    return Status::InvalidField(field, "has no value " + std::to_string(value));
  }
  std::string name = v->name().substr(EnumPrefix(f->enum_type()).size());
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return name;
}

using Headers = pb::Map<std::string, std::string>;

// The contract's only map, a target's headers, read by its own type: the
// reflection of map fields syncs them to a repeated field inside a const
// message, which crashed under TSan (protobuf 3.21).
Result<const Headers*> HeadersOf(const pb::Message& m, const std::string& field) {
  if (m.GetDescriptor() != v1::Target::descriptor()) {
    return Status::Internal(field + ": a map the transcoder does not know");
  }
  return &static_cast<const v1::Target&>(m).headers();
}

// Whether singular field `f` is written: when present, for a field with
// presence; when not its default, for a proto3 scalar.
bool IsSet(const pb::Message& m, const FD* f) {
  const pb::Reflection* r = m.GetReflection();
  if (f->has_presence()) return r->HasField(m, f);
  switch (f->cpp_type()) {
    case FD::CPPTYPE_INT32:
      return r->GetInt32(m, f) != 0;
    case FD::CPPTYPE_INT64:
      return r->GetInt64(m, f) != 0;
    case FD::CPPTYPE_UINT32:
      return r->GetUInt32(m, f) != 0;
    case FD::CPPTYPE_UINT64:
      return r->GetUInt64(m, f) != 0;
    case FD::CPPTYPE_DOUBLE:
      return r->GetDouble(m, f) != 0;
    case FD::CPPTYPE_FLOAT:
      return r->GetFloat(m, f) != 0;
    case FD::CPPTYPE_BOOL:
      return r->GetBool(m, f);
    case FD::CPPTYPE_ENUM:
      return r->GetEnumValue(m, f) != 0;
    case FD::CPPTYPE_STRING:
      return !r->GetString(m, f).empty();
    case FD::CPPTYPE_MESSAGE:
      return r->HasField(m, f);
  }
  return false;
}

// One value of field `f` (element `i` of a repeated one, else -1).
Status WriteValue(JsonWriter& w, const pb::Message& m, const FD* f, int i,
                  const std::string& field);

Status WriteMessage(JsonWriter& w, const pb::Message& m, const std::vector<std::string_view>& skip,
                    const std::string& prefix) {
  const pb::Descriptor* d = m.GetDescriptor();
  const pb::Reflection* r = m.GetReflection();
  const FD* body_is_json = d->FindFieldByName("body_is_json");
  w.BeginObject();
  for (int k = 0; k < d->field_count(); ++k) {
    const FD* f = d->field(k);
    if (f == body_is_json || std::find(skip.begin(), skip.end(), f->name()) != skip.end()) {
      continue;
    }
    const std::string field = prefix.empty() ? f->name() : prefix + "." + f->name();
    if (f->is_map()) {
      Result<const Headers*> headers = HeadersOf(m, field);
      if (!headers.ok()) return headers.status();
      if ((*headers)->empty()) continue;
      std::map<std::string, std::string> sorted((*headers)->begin(), (*headers)->end());
      w.Key(f->name()).BeginObject();
      for (const auto& [name, value] : sorted) w.Key(name).String(value);
      w.EndObject();
      continue;
    }
    if (f->is_repeated()) {
      const int n = r->FieldSize(m, f);
      if (n == 0) continue;
      w.Key(f->name()).BeginArray();
      for (int e = 0; e < n; ++e) {
        Status s = WriteValue(w, m, f, e, field + "[" + std::to_string(e) + "]");
        if (!s.ok()) return s;
      }
      w.EndArray();
      continue;
    }
    if (!IsSet(m, f)) continue;
    if (f->name() == "body" && f->type() == FD::TYPE_BYTES) {
      std::string scratch;
      const std::string& bytes = r->GetStringReference(m, f, &scratch);
      if (body_is_json != nullptr && r->GetBool(m, body_is_json)) {
        // The JSON text itself, so that it reads back byte for byte; checked
        // first (and its depth bounded) as the HTTP API checks a request.
        if (Result<json> parsed = ParseJson(bytes, field); !parsed.ok()) {
          return Status::InvalidField(field, "is not a JSON text, yet body_is_json is set");
        }
        w.Key("body").Raw(bytes);
      } else {
        w.Key("body_base64").String(Base64Encode(bytes));
      }
      continue;
    }
    w.Key(f->name());
    Status s = WriteValue(w, m, f, -1, field);
    if (!s.ok()) return s;
  }
  w.EndObject();
  return Status::Ok();
}

Status WriteValue(JsonWriter& w, const pb::Message& m, const FD* f, int i,
                  const std::string& field) {
  const pb::Reflection* r = m.GetReflection();
  const bool rep = i >= 0;
  switch (f->cpp_type()) {
    case FD::CPPTYPE_INT32:
      w.Int(rep ? r->GetRepeatedInt32(m, f, i) : r->GetInt32(m, f));
      break;
    case FD::CPPTYPE_INT64:
      w.Int(rep ? r->GetRepeatedInt64(m, f, i) : r->GetInt64(m, f));
      break;
    case FD::CPPTYPE_UINT32:
      w.Uint(rep ? r->GetRepeatedUInt32(m, f, i) : r->GetUInt32(m, f));
      break;
    case FD::CPPTYPE_UINT64:
      w.Uint(rep ? r->GetRepeatedUInt64(m, f, i) : r->GetUInt64(m, f));
      break;
    case FD::CPPTYPE_DOUBLE:
      w.Double(rep ? r->GetRepeatedDouble(m, f, i) : r->GetDouble(m, f));
      break;
    case FD::CPPTYPE_FLOAT:
      w.Double(rep ? r->GetRepeatedFloat(m, f, i) : r->GetFloat(m, f));
      break;
    case FD::CPPTYPE_BOOL:
      w.Bool(rep ? r->GetRepeatedBool(m, f, i) : r->GetBool(m, f));
      break;
    case FD::CPPTYPE_STRING:
      if (f->type() == FD::TYPE_BYTES) {
        w.String(Base64Encode(rep ? r->GetRepeatedString(m, f, i) : r->GetString(m, f)));
      } else {
        w.String(rep ? r->GetRepeatedString(m, f, i) : r->GetString(m, f));
      }
      break;
    case FD::CPPTYPE_ENUM: {
      Result<std::string> name =
          EnumName(f, rep ? r->GetRepeatedEnumValue(m, f, i) : r->GetEnumValue(m, f), field);
      if (!name.ok()) return name.status();
      w.String(*name);
      break;
    }
    case FD::CPPTYPE_MESSAGE: {
      const pb::Message& sub = rep ? r->GetRepeatedMessage(m, f, i) : r->GetMessage(m, f);
      const pb::Descriptor* d = sub.GetDescriptor();
      const pb::Reflection* sr = sub.GetReflection();
      if (d->full_name() == "google.protobuf.Timestamp" ||
          d->full_name() == "google.protobuf.Duration") {
        const int64_t seconds = sr->GetInt64(sub, d->FindFieldByName("seconds"));
        const int32_t nanos = sr->GetInt32(sub, d->FindFieldByName("nanos"));
        if (d->full_name() == "google.protobuf.Duration") {
          if (seconds < 0 || nanos < 0 || seconds > kMaxSeconds) {
            return Status::InvalidField(field, "must be a duration of 0 or more");
          }
          w.Int(seconds * 1000 + nanos / 1'000'000);
        } else {
          if (seconds < kMinSeconds || seconds > kMaxSeconds || nanos < 0 || nanos > 999'999'999) {
            return Status::InvalidField(field, "must be a time from year 1 to 9999");
          }
          w.Time(seconds * 1000 + nanos / 1'000'000);
        }
        break;
      }
      return WriteMessage(w, sub, {}, field);
    }
  }
  return Status::Ok();
}

Status Misfit(const std::string& field) {
  return Status::Internal("the answer's field " + field + " does not fit the contract");
}

// Whether filling a message of type `d` needs the JSON's source text: for a
// body's exact bytes, its own or a nested message's. Everything else is read
// from the parsed document, which is parsed once per answer.
bool NeedsText(const pb::Descriptor* d, int depth = 0) {
  if (depth > 8 || d->file()->package() == "google.protobuf") return false;
  for (int k = 0; k < d->field_count(); ++k) {
    const FD* f = d->field(k);
    if (f->name() == "body" && f->type() == FD::TYPE_BYTES) return true;
    if (f->cpp_type() == FD::CPPTYPE_MESSAGE && !f->is_map() &&
        NeedsText(f->message_type(), depth + 1)) {
      return true;
    }
  }
  return false;
}

Status FillMessage(const json& j, std::string_view text, pb::Message* m, const std::string& prefix);

// Sets field `f` of `m` (adds to it when repeated) from `v`, whose source
// text is `text` (empty unless the field's message needs it).
Status FillValue(const json& v, std::string_view text, pb::Message* m, const FD* f,
                 const std::string& field) {
  const pb::Reflection* r = m->GetReflection();
  const bool rep = f->is_repeated();
  switch (f->cpp_type()) {
    case FD::CPPTYPE_INT32:
    case FD::CPPTYPE_INT64:
      if (!v.is_number_integer()) return Misfit(field);
      if (f->cpp_type() == FD::CPPTYPE_INT32) {
        rep ? r->AddInt32(m, f, v.get<int32_t>()) : r->SetInt32(m, f, v.get<int32_t>());
      } else {
        rep ? r->AddInt64(m, f, v.get<int64_t>()) : r->SetInt64(m, f, v.get<int64_t>());
      }
      return Status::Ok();
    case FD::CPPTYPE_UINT32:
    case FD::CPPTYPE_UINT64:
      if (!v.is_number_unsigned()) return Misfit(field);
      if (f->cpp_type() == FD::CPPTYPE_UINT32) {
        rep ? r->AddUInt32(m, f, v.get<uint32_t>()) : r->SetUInt32(m, f, v.get<uint32_t>());
      } else {
        rep ? r->AddUInt64(m, f, v.get<uint64_t>()) : r->SetUInt64(m, f, v.get<uint64_t>());
      }
      return Status::Ok();
    case FD::CPPTYPE_DOUBLE:
    case FD::CPPTYPE_FLOAT:
      if (!v.is_number()) return Misfit(field);
      if (f->cpp_type() == FD::CPPTYPE_DOUBLE) {
        rep ? r->AddDouble(m, f, v.get<double>()) : r->SetDouble(m, f, v.get<double>());
      } else {
        rep ? r->AddFloat(m, f, v.get<float>()) : r->SetFloat(m, f, v.get<float>());
      }
      return Status::Ok();
    case FD::CPPTYPE_BOOL:
      if (!v.is_boolean()) return Misfit(field);
      rep ? r->AddBool(m, f, v.get<bool>()) : r->SetBool(m, f, v.get<bool>());
      return Status::Ok();
    case FD::CPPTYPE_STRING:
      if (!v.is_string()) return Misfit(field);
      rep ? r->AddString(m, f, v.get<std::string>()) : r->SetString(m, f, v.get<std::string>());
      return Status::Ok();
    case FD::CPPTYPE_ENUM: {
      if (!v.is_string()) return Misfit(field);
      std::string name = v.get<std::string>();
      std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) {
        return c == '-' ? '_' : static_cast<char>(std::toupper(c));
      });
      const pb::EnumValueDescriptor* e =
          f->enum_type()->FindValueByName(EnumPrefix(f->enum_type()) + name);
      if (e == nullptr) return Misfit(field);
      rep ? r->AddEnumValue(m, f, e->number()) : r->SetEnumValue(m, f, e->number());
      return Status::Ok();
    }
    case FD::CPPTYPE_MESSAGE:
      break;
  }
  pb::Message* sub = rep ? r->AddMessage(m, f) : r->MutableMessage(m, f);
  const std::string& type = f->message_type()->full_name();
  if (type == "google.protobuf.Timestamp") {
    std::optional<int64_t> ms;
    if (v.is_string()) ms = ParseRfc3339(v.get<std::string>());
    if (!ms) return Misfit(field);
    const int64_t seconds = *ms >= 0 ? *ms / 1000 : -((-*ms + 999) / 1000);
    const pb::Descriptor* d = sub->GetDescriptor();
    sub->GetReflection()->SetInt64(sub, d->FindFieldByName("seconds"), seconds);
    sub->GetReflection()->SetInt32(sub, d->FindFieldByName("nanos"),
                                   static_cast<int32_t>((*ms - seconds * 1000) * 1'000'000));
    return Status::Ok();
  }
  if (type == "google.protobuf.Struct" || type == "google.protobuf.Value") {
    if (!pb::util::JsonStringToMessage(v.dump(), sub).ok()) return Misfit(field);
    return Status::Ok();
  }
  if (!v.is_object()) return Misfit(field);
  return FillMessage(v, text, sub, field);
}

Status FillMessage(const json& j, std::string_view text, pb::Message* m,
                   const std::string& prefix) {
  if (!j.is_object()) return Misfit(prefix.empty() ? "(the answer)" : prefix);
  const pb::Descriptor* d = m->GetDescriptor();
  const pb::Reflection* r = m->GetReflection();
  for (int k = 0; k < d->field_count(); ++k) {
    const FD* f = d->field(k);
    const std::string field = prefix.empty() ? f->name() : prefix + "." + f->name();
    if (f->name() == "body" && f->type() == FD::TYPE_BYTES) {
      const FD* is_json = d->FindFieldByName("body_is_json");
      auto body = j.find("body");
      auto b64 = j.find("body_base64");
      if (body != j.end() && !body->is_null()) {
        std::optional<std::string_view> raw = JsonMemberText(text, "body");
        if (!raw) return Misfit(field);
        r->SetString(m, f, std::string(*raw));
        if (is_json != nullptr) r->SetBool(m, is_json, true);
      } else if (b64 != j.end() && b64->is_string()) {
        std::optional<std::string> bytes = Base64Decode(b64->get<std::string>());
        if (!bytes) return Misfit(field);
        r->SetString(m, f, std::move(*bytes));
      }
      continue;
    }
    auto it = j.find(f->name());
    if (it == j.end() || it->is_null()) continue;
    const bool needs_text =
        f->cpp_type() == FD::CPPTYPE_MESSAGE && !f->is_map() && NeedsText(f->message_type());
    const std::string_view member =
        needs_text ? JsonMemberText(text, f->name()).value_or("") : std::string_view();
    if (f->is_map()) {
      Result<const Headers*> headers = HeadersOf(*m, field);
      if (!headers.ok() || !it->is_object()) return Misfit(field);
      Headers* out = static_cast<v1::Target*>(m)->mutable_headers();
      for (const auto& [key, value] : it->items()) {
        if (!value.is_string()) return Misfit(field);
        (*out)[key] = value.get<std::string>();
      }
    } else if (f->is_repeated()) {
      if (!it->is_array()) return Misfit(field);
      const std::vector<std::string_view> texts =
          needs_text ? JsonElementTexts(member) : std::vector<std::string_view>();
      for (size_t e = 0; e < it->size(); ++e) {
        Status s = FillValue((*it)[e], needs_text ? texts.at(e) : std::string_view(), m, f,
                             field + "[" + std::to_string(e) + "]");
        if (!s.ok()) return s;
      }
    } else {
      Status s = FillValue(*it, member, m, f, field);
      if (!s.ok()) return s;
    }
  }
  return Status::Ok();
}

}  // namespace

Result<std::string> RequestJson(const pb::Message& m, const std::vector<std::string_view>& skip,
                                const std::string& prefix) {
  std::string out;
  JsonWriter w(out);
  Status s = WriteMessage(w, m, skip, prefix);
  if (!s.ok()) return s;
  return out;
}

Status FillFromJson(std::string_view text, std::initializer_list<pb::Message*> ms) {
  const json j = json::parse(text, nullptr, false);
  for (pb::Message* m : ms) {
    if (Status s = FillMessage(j, text, m, ""); !s.ok()) return s;
  }
  return Status::Ok();
}

Problem ProblemFromJson(int http_status, std::string_view text) {
  Problem p;
  p.http_status = http_status;
  const json j = json::parse(text, nullptr, false);
  auto str = [&j](const char* name) {
    return j.is_object() && j.contains(name) && j[name].is_string() ? j[name].get<std::string>()
                                                                    : std::string();
  };
  const std::string type = str("type");
  p.slug = type.substr(type.rfind('/') + 1);
  p.title = str("title");
  p.detail = str("detail");
  p.field = str("field");
  if (j.is_object() && j.contains("job_ids") && j["job_ids"].is_array()) {
    for (const json& id : j["job_ids"]) {
      if (id.is_number_unsigned()) p.job_ids.push_back(id.get<uint64_t>());
    }
  }
  if (p.detail.empty()) p.detail = "HTTP status " + std::to_string(http_status);
  return p;
}

}  // namespace delayd::rpc
