// Exact order statistics of a float array without sorting it: a radix select over an
// order-preserving 32-bit key of each value. One pass histograms the top 16 key bits (and
// finds NaN/Inf for free in the outermost buckets); a second pass pins each wanted rank to
// one full key, i.e. one exact value, either by counting the low 16 bits of the values in
// the buckets that hold wanted ranks (linear; a 256 KiB count array per such bucket) or,
// when those buckets hold few values or are many (small tensors, sortquant with many
// groups), by gathering those values' keys and sorting just them. A wanted bucket crowded
// with +0 or -0 (ReLU's zeros: half the values) is first checked for holding nothing else,
// in a streaming pass; if so its ranks are that zero, with no counting.
#pragma once

#include <cstdint>
#include <vector>

namespace dtrain::compress {

// Order-preserving key: a < b (as floats, -0 < +0) iff key(a) < key(b).
inline uint32_t order_key(float x) {
  uint32_t u;
  static_assert(sizeof(u) == sizeof(x));
  __builtin_memcpy(&u, &x, 4);
  // Negatives: all bits flipped; others: the sign bit set. Arithmetic, not a select, so
  // no compiler turns it into a branch on the sign (random signs would mispredict).
  const uint32_t negative = static_cast<uint32_t>(static_cast<int32_t>(u) >> 31);
  return u ^ (negative | 0x80000000u);
}

// Values at the given 0-based ranks of x[0, n) in ascending order (ranks need not be
// sorted or distinct; each must be < n). x is not modified. Throws std::invalid_argument
// if x holds NaN or Inf. The passes over x use up to `threads` threads (chunks.h); the
// result is the same for any count.
std::vector<float> order_statistics(const float* x, int64_t n, const std::vector<int64_t>& ranks,
                                    int threads = 1);

// With buckets = key >> shift (shift <= 23), the buckets below 0x00800000 >> shift and from
// 0xFF800000 >> shift up hold only NaN and Inf keys (-NaN, -Inf below; +Inf, +NaN above).
template <class Count>
bool has_non_finite(const Count* bucket_counts, int shift) {
  const uint32_t low_end = 0x00800000u >> shift, high_begin = 0xFF800000u >> shift;
  const uint32_t buckets = uint32_t{1} << (32 - shift);
  for (uint32_t b = 0; b < low_end; ++b) {
    if (bucket_counts[b] != 0) return true;
  }
  for (uint32_t b = high_begin; b < buckets; ++b) {
    if (bucket_counts[b] != 0) return true;
  }
  return false;
}

}  // namespace dtrain::compress
