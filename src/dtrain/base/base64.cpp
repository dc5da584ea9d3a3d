#include "dtrain/base/base64.h"

#include <algorithm>
#include <array>
#include <cstdint>

namespace dtrain {
namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::array<int8_t, 256> decoding_table() {
  std::array<int8_t, 256> table{};
  table.fill(-1);
  for (int i = 0; i < 64; ++i)
    table[static_cast<uint8_t>(kAlphabet[i])] = static_cast<int8_t>(i);
  return table;
}

}  // namespace

std::string base64_encode(const std::string& bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    uint32_t word = 0;
    for (size_t k = 0; k < 3; ++k)
      word = (word << 8) | (k < n ? static_cast<uint8_t>(bytes[i + k]) : 0u);
    for (size_t k = 0; k < 4; ++k)
      out += k <= n ? kAlphabet[(word >> (18 - 6 * k)) & 63] : '=';
  }
  return out;
}

std::optional<std::string> base64_decode(const std::string& text) {
  static const std::array<int8_t, 256> table = decoding_table();
  if (text.size() % 4 != 0) return std::nullopt;
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    const size_t pad = last ? (text[i + 3] == '=') + (text[i + 2] == '=') : 0;
    if (pad == 1 && text[i + 2] == '=') return std::nullopt;  // "x=y=" is not padding
    uint32_t word = 0;
    for (size_t k = 0; k < 4; ++k) {
      const int8_t v = k < 4 - pad ? table[static_cast<uint8_t>(text[i + k])] : 0;
      if (v < 0) return std::nullopt;
      word = (word << 6) | static_cast<uint32_t>(v);
    }
    for (size_t k = 0; k < 3 - pad; ++k)
      out += static_cast<char>((word >> (16 - 8 * k)) & 0xff);
  }
  return out;
}

}  // namespace dtrain
