// Exact order statistics of a float array without sorting it, in expected linear time:
// one histogram pass over the top 16 bits of an order-preserving integer key, one pass
// gathering the (few) elements of the buckets that hold the wanted ranks, then a
// selection (nth_element) inside each gathered bucket.
#pragma once

#include <cstdint>
#include <vector>

namespace dtrain::compress {

// Order-preserving key: a < b (as floats, -0 < +0) iff key(a) < key(b).
inline uint32_t order_key(float x) {
  uint32_t u;
  static_assert(sizeof(u) == sizeof(x));
  __builtin_memcpy(&u, &x, 4);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Values at the given 0-based ranks of x[0, n) in ascending order (ranks need not be
// sorted or distinct; each must be < n). x is not modified.
std::vector<float> order_statistics(const float* x, int64_t n, const std::vector<int64_t>& ranks);

}  // namespace dtrain::compress
