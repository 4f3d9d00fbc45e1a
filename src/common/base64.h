// Base64 (RFC 4648, with padding) over OpenSSL's EVP block coder.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace delayd {

std::string Base64Encode(std::string_view bytes);
// nullopt unless `text` is padded base64 of the standard alphabet.
std::optional<std::string> Base64Decode(std::string_view text);

}  // namespace delayd
