// Internal: the quantization rule and the CPU kernels the codec families (one per file,
// codec_family.h) share. Tests mirror quantize/dequantize exactly, so keep them bit-stable.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "dtrain/compress/codec.h"

namespace dtrain::compress {

// Codes are produced and consumed in blocks of this many values (a multiple of 8, so
// every block starts on a byte boundary of the packed stream).
constexpr int64_t kCodeBlock = 4096;

// sortquant's groups: ranks [2g, 2g+1] of the returned list are group g's first and last
// (n > 0); sortquant_table turns the values at those ranks into the packet's table. The CPU
// encoder (order_statistics) and the tensor one (a sort) share both.
std::vector<int64_t> sortquant_ranks(int64_t n, int groups);
struct GroupTable {
  std::vector<float> lo, step;    // per group; an empty group keeps (0, 0)
  std::vector<float> thresholds;  // t_1 .. t_{G-1}, ascending: group g starts at t_g
  static GroupTable empty(int groups);
  void write(uint8_t* table) const;  // 8 bytes a group: (lo, step), little-endian
};
GroupTable sortquant_table(const std::vector<float>& stats, int64_t n, int groups, int level_bits);

// Uniform levels between lo and hi (inclusive): step = (hi - lo) / (levels - 1).
inline float level_step(float lo, float hi, int levels) {
  return levels > 1 && hi > lo ? (hi - lo) / static_cast<float>(levels - 1) : 0.f;
}

// round-half-even((x - lo) / step), clamped to [0, max_level]; 0 when step is 0.
// Adding and subtracting 2^23 rounds a float in [0, 2^23) to the nearest integer (ties to
// even) with plain SSE2 arithmetic, the same result as nearbyint() in the default mode.
inline uint16_t quantize(float x, float lo, float step, int max_level) {
  if (!(step > 0.f)) return 0;
  float v = (x - lo) / step;
  v = std::min(std::max(v, 0.f), static_cast<float>(max_level));
  const float r = (v + 8388608.f) - 8388608.f;
  return static_cast<uint16_t>(r);
}

inline float dequantize(uint16_t level, float lo, float step) {
  return lo + static_cast<float>(level) * step;
}

// Throws std::invalid_argument ("... NaN or Inf ...") if any value is not finite.
void require_finite(const float* x, int64_t n);

// Min and max of x (0, 0 when empty), checking finiteness in the same pass.
struct ValueRange {
  float lo, hi;
};
ValueRange finite_range(const float* x, int64_t n, int chunks);

[[noreturn]] void throw_non_finite();

// Group-wise quantization of count values: group g = number of thresholds <= x (thresholds
// ascending, at most kMaxInlineThresholds), code = (g << level_bits) | quantize(x, lo[g],
// step[g], max_level). Bit-identical to the scalar rule, four values at a time with SSE2.
constexpr int kMaxInlineThresholds = 15;
void quantize_grouped(const float* x, int64_t count, const float* thresholds, int n_thresholds,
                      const float* lo, const float* step, int level_bits, int max_level,
                      uint16_t* codes);

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define DTRAIN_AVX2_KERNELS 1
// The same codes eight at a time (scan_avx2.cpp); only on CPUs with AVX2. Returns how many
// leading values it coded (a multiple of 8); the caller codes the rest.
int64_t quantize_grouped_avx2(const float* x, int64_t count, const float* thresholds,
                              int n_thresholds, const float* lo, const float* step, int level_bits,
                              int max_level, uint16_t* codes);
#else
#define DTRAIN_AVX2_KERNELS 0
#endif

// out[i] = value_of_code[code i of the packed payload]: decoding for codecs whose every code
// maps to one value (sortquant, kmeans). value_of_code holds 2^bits entries.
void decode_by_table(const uint8_t* payload, int64_t n, int bits, const float* value_of_code,
                     float* out, int chunks);

// Little-endian float table entries.
inline void put_f32(uint8_t* p, float v) {
  std::memcpy(p, &v, 4);
}
inline float get_f32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}

}  // namespace dtrain::compress
