#include "common/trace_context.h"

#include <openssl/rand.h>

#include <random>
#include <set>
#include <vector>

namespace delayd {
namespace {

constexpr std::string_view kHex = "0123456789abcdef";

bool LowerHex(std::string_view s) {
  for (char c : s) {
    if (kHex.find(c) == kHex.npos) return false;
  }
  return true;
}

bool AllZero(std::string_view s) { return s.find_first_not_of('0') == s.npos; }

std::string_view TrimOws(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool LcAlpha(char c) { return c >= 'a' && c <= 'z'; }
bool Digit(char c) { return c >= '0' && c <= '9'; }
bool KeyChar(char c) {
  return LcAlpha(c) || Digit(c) || c == '_' || c == '-' || c == '*' || c == '/';
}

// key = simple-key / multi-tenant-key (tenant-id "@" system-id).
bool ValidKey(std::string_view key) {
  const size_t at = key.find('@');
  if (at == key.npos) {
    if (key.empty() || key.size() > 256 || !LcAlpha(key.front())) return false;
    for (char c : key) {
      if (!KeyChar(c)) return false;
    }
    return true;
  }
  const std::string_view tenant = key.substr(0, at), system = key.substr(at + 1);
  if (tenant.empty() || tenant.size() > 241 || !(LcAlpha(tenant.front()) || Digit(tenant.front())))
    return false;
  if (system.empty() || system.size() > 14 || !LcAlpha(system.front())) return false;
  for (char c : tenant) {
    if (!KeyChar(c)) return false;
  }
  for (char c : system) {
    if (!KeyChar(c)) return false;
  }
  return true;
}

// value = 0*255(chr) nblk-chr: printable ASCII but ',' and '='. (It cannot
// end in a space: spaces before a ',' or the end are the list's, trimmed.)
bool ValidValue(std::string_view value) {
  if (value.empty() || value.size() > 256) return false;
  for (char c : value) {
    if (c < 0x20 || c > 0x7e || c == ',' || c == '=') return false;
  }
  return true;
}

}  // namespace

std::optional<TraceParent> ParseTraceparent(std::string_view header) {
  const std::string_view h = TrimOws(header);
  if (h.size() < 55) return std::nullopt;
  const std::string_view version = h.substr(0, 2);
  if (!LowerHex(version) || version == "ff") return std::nullopt;
  if (version == "00" ? h.size() != 55 : (h.size() > 55 && h[55] != '-')) return std::nullopt;
  if (h[2] != '-' || h[35] != '-' || h[52] != '-') return std::nullopt;
  TraceParent tp;
  tp.trace_id = std::string(h.substr(3, 32));
  tp.parent_id = std::string(h.substr(36, 16));
  const std::string_view flags = h.substr(53, 2);
  if (!LowerHex(tp.trace_id) || AllZero(tp.trace_id) || !LowerHex(tp.parent_id) ||
      AllZero(tp.parent_id) || !LowerHex(flags)) {
    return std::nullopt;
  }
  tp.flags = static_cast<uint8_t>(kHex.find(flags[0]) * 16 + kHex.find(flags[1]));
  return tp;
}

std::string FormatTraceparent(const TraceParent& tp) {
  std::string out = "00-" + tp.trace_id + "-" + tp.parent_id + "-";
  out += kHex[tp.flags >> 4];
  out += kHex[tp.flags & 15];
  return out;
}

std::optional<std::string> ParseTracestate(std::string_view header) {
  constexpr size_t kMaxMembers = 32;
  std::vector<std::string_view> members;
  std::set<std::string_view> keys;
  while (true) {
    const size_t comma = header.find(',');
    const std::string_view member = TrimOws(header.substr(0, comma));
    if (!member.empty()) {
      const size_t eq = member.find('=');
      if (eq == member.npos || members.size() == kMaxMembers) return std::nullopt;
      const std::string_view key = member.substr(0, eq);
      if (!ValidKey(key) || !ValidValue(member.substr(eq + 1)) || !keys.insert(key).second) {
        return std::nullopt;
      }
      members.push_back(member);
    }
    if (comma == header.npos) break;
    header.remove_prefix(comma + 1);
  }
  std::string out;
  for (std::string_view m : members) {
    if (!out.empty()) out += ',';
    out += m;
  }
  return out;
}

std::string NewParentId() {
  unsigned char bytes[8] = {};
  if (RAND_bytes(bytes, sizeof bytes) != 1) {
    // Unique, not secret: a thread's own generator serves when OpenSSL's
    // cannot.
    thread_local std::mt19937_64 rng{std::random_device{}()};
    const uint64_t v = rng();
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<unsigned char>(v >> (8 * i));
  }
  std::string out;
  for (unsigned char b : bytes) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  if (AllZero(out)) out.back() = '1';
  return out;
}

}  // namespace delayd
