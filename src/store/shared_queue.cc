#include "store/shared_queue.h"

#include <fmt/format.h>

#include <charconv>

namespace delayd::store {

std::string FormatDue(const std::vector<DueEntry>& entries) {
  std::string out;
  for (const DueEntry& e : entries) {
    if (!out.empty()) out += ';';
    fmt::format_to(std::back_inserter(out), "{} {} {}", e.shard, e.id, e.due_ms);
  }
  return out;
}

namespace {
template <class T>
bool Number(std::string_view& s, T& out) {
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  if (ec != std::errc()) return false;
  s.remove_prefix(static_cast<size_t>(end - s.data()));
  return true;
}
bool Skip(std::string_view& s, char c) {
  if (s.empty() || s.front() != c) return false;
  s.remove_prefix(1);
  return true;
}
}  // namespace

std::vector<DueEntry> ParseDue(std::string_view payload) {
  std::vector<DueEntry> out;
  while (!payload.empty()) {
    const size_t end = payload.find(';');
    std::string_view one = payload.substr(0, end);
    payload = end == std::string_view::npos ? std::string_view() : payload.substr(end + 1);
    DueEntry e;
    if (Number(one, e.shard) && Skip(one, ' ') && Number(one, e.id) && Skip(one, ' ') &&
        Number(one, e.due_ms) && one.empty()) {
      out.push_back(e);
    }
  }
  return out;
}

}  // namespace delayd::store
