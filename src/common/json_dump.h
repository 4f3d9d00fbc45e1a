// Serializing an nlohmann::json that may hold text from outside (a request
// path, a target's error reply): nlohmann's dump() throws on invalid UTF-8,
// so every dump in delayd goes through here and replaces such bytes with
// U+FFFD instead, as JsonWriter does.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace delayd {

inline std::string DumpJson(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace delayd
