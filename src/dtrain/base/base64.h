// Base64 (RFC 4648, standard alphabet, padded): how etcd's JSON gateway carries keys and
// values, which are bytes.
#pragma once

#include <optional>
#include <string>

namespace dtrain {

std::string base64_encode(const std::string& bytes);
// The bytes `text` encodes; nullopt when it is not padded base64 of the standard alphabet.
std::optional<std::string> base64_decode(const std::string& text);

}  // namespace dtrain
