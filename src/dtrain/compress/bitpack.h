// Bit packing of fixed-width codes, LSB first: code i occupies bits [i*b, (i+1)*b) of a
// little-endian bit stream. A 12-bit code costs exactly 12 bits; the last byte is
// zero-padded.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dtrain::compress {

constexpr size_t packed_bytes(int64_t n, int bits) {
  return static_cast<size_t>((n * bits + 7) / 8);
}

// Packs codes[start, start+count) into `out`, where `start * bits` is a multiple of 8
// (callers pack in blocks of a multiple of 8 codes). Codes must be < 2^bits (1 <= bits <= 16).
void pack_bits(const uint16_t* codes, int64_t count, int bits, uint8_t* out, int64_t start);

// Inverse of pack_bits; reads only bytes inside [in, in + packed_bytes(start+count, bits)).
void unpack_bits(const uint8_t* in, int64_t count, int bits, uint16_t* codes, int64_t start);

}  // namespace dtrain::compress
