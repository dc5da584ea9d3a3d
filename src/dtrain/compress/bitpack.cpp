#include "dtrain/compress/bitpack.h"

#include <cstring>

namespace dtrain::compress {

void pack_bits(const uint16_t* codes, int64_t count, int bits, uint8_t* out, int64_t start) {
  uint8_t* dst = out + (start * bits) / 8;
  if (bits == 8) {
    for (int64_t i = 0; i < count; ++i)
      dst[i] = static_cast<uint8_t>(codes[i]);
    return;
  }
  if (bits == 16) {
    for (int64_t i = 0; i < count; ++i) {
      dst[2 * i] = static_cast<uint8_t>(codes[i]);
      dst[2 * i + 1] = static_cast<uint8_t>(codes[i] >> 8);
    }
    return;
  }
  uint64_t acc = 0;
  int filled = 0;
  for (int64_t i = 0; i < count; ++i) {
    acc |= static_cast<uint64_t>(codes[i]) << filled;
    filled += bits;
    if (filled >= 32) {
      const uint32_t word = static_cast<uint32_t>(acc);
      std::memcpy(dst, &word, 4);  // little-endian host (x86-64, aarch64)
      dst += 4;
      acc >>= 32;
      filled -= 32;
    }
  }
  while (filled > 0) {
    *dst++ = static_cast<uint8_t>(acc);
    acc >>= 8;
    filled -= 8;
  }
}

void unpack_bits(const uint8_t* in, int64_t count, int bits, uint16_t* codes, int64_t start) {
  const uint8_t* src = in + (start * bits) / 8;
  if (bits == 8) {
    for (int64_t i = 0; i < count; ++i)
      codes[i] = src[i];
    return;
  }
  if (bits == 16) {
    for (int64_t i = 0; i < count; ++i) {
      codes[i] = static_cast<uint16_t>(src[2 * i] | (src[2 * i + 1] << 8));
    }
    return;
  }
  const uint32_t mask = (1u << bits) - 1;
  const int64_t total_bytes = (count * bits + 7) / 8;
  int64_t i = 0;
  // Fast path: a 4-byte load covers any code (bits + 7 <= 23 < 32) while 4 bytes remain.
  for (; i < count; ++i) {
    const int64_t bit = i * bits;
    const int64_t byte = bit >> 3;
    if (byte + 4 > total_bytes) break;
    uint32_t word;
    std::memcpy(&word, src + byte, 4);
    codes[i] = static_cast<uint16_t>((word >> (bit & 7)) & mask);
  }
  for (; i < count; ++i) {  // tail: byte by byte, never past the last byte
    const int64_t bit = i * bits;
    uint32_t word = 0;
    for (int64_t b = bit >> 3, k = 0; b < total_bytes && k < 4; ++b, ++k) {
      word |= static_cast<uint32_t>(src[b]) << (8 * k);
    }
    codes[i] = static_cast<uint16_t>((word >> (bit & 7)) & mask);
  }
}

}  // namespace dtrain::compress
