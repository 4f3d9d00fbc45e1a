// The web console's files (src/http/console/), compiled into the binary so
// that the console works offline and needs no CDN. Api serves them: "/" is
// index.html, "/console/<name>" the rest, "/console/config.json" the mode.
#pragma once

#include <string_view>
#include <vector>

namespace delayd::http {

enum class ConsoleMode : uint8_t { kOn, kReadOnly, kOff };

struct ConsoleAsset {
  std::string_view name;  // "console.js"
  std::string_view content_type;
  std::string_view body;
};

const std::vector<ConsoleAsset>& ConsoleAssets();

}  // namespace delayd::http
