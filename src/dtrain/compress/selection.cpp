#include "dtrain/compress/selection.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace dtrain::compress {

std::vector<float> order_statistics(const float* x, int64_t n, const std::vector<int64_t>& ranks) {
  constexpr int kShift = 16;
  constexpr size_t kBuckets = size_t{1} << (32 - kShift);
  for (int64_t r : ranks) {
    if (r < 0 || r >= n) throw std::out_of_range("order_statistics: rank out of range");
  }
  std::vector<float> result(ranks.size());
  std::vector<uint32_t> counts(kBuckets, 0);
  for (int64_t i = 0; i < n; ++i)
    ++counts[order_key(x[i]) >> kShift];
  if (has_non_finite(counts.data(), kShift)) {
    throw std::invalid_argument("input contains NaN or Inf; codecs take finite values only");
  }
  if (ranks.empty()) return result;

  // Radix select in two passes: the top 16 key bits locate each wanted rank's bucket, a
  // second pass counts the low 16 bits of the values in those buckets only, which pins the
  // rank to one full 32-bit key, i.e. one exact value. No gathering, no sorting; ties and
  // large buckets (ReLU's zeros) cost no more than anything else.
  std::vector<int64_t> below(kBuckets + 1, 0);
  for (size_t b = 0; b < kBuckets; ++b)
    below[b + 1] = below[b] + counts[b];
  std::vector<int32_t> slot_of_bucket(kBuckets, -1);
  std::vector<size_t> bucket_of(ranks.size());
  int32_t slots = 0;
  for (size_t w = 0; w < ranks.size(); ++w) {
    const auto b = static_cast<size_t>(std::upper_bound(below.begin(), below.end(), ranks[w]) -
                                       below.begin() - 1);
    bucket_of[w] = b;
    if (slot_of_bucket[b] < 0) slot_of_bucket[b] = slots++;
  }
  std::vector<uint32_t> low_counts(static_cast<size_t>(slots) << 16, 0);
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t key = order_key(x[i]);
    const int32_t slot = slot_of_bucket[key >> kShift];
    if (slot >= 0) ++low_counts[(static_cast<size_t>(slot) << 16) | (key & 0xFFFF)];
  }
  for (size_t w = 0; w < ranks.size(); ++w) {
    const size_t b = bucket_of[w];
    const uint32_t* sub = low_counts.data() + (static_cast<size_t>(slot_of_bucket[b]) << 16);
    int64_t remaining = ranks[w] - below[b];
    uint32_t low = 0;
    while (remaining >= sub[low])
      remaining -= sub[low++];
    const uint32_t key = (static_cast<uint32_t>(b) << kShift) | low;
    const uint32_t bits = (key & 0x80000000u) ? (key & 0x7FFFFFFFu) : ~key;  // invert order_key
    float v;
    std::memcpy(&v, &bits, 4);
    result[w] = v;
  }
  return result;
}

}  // namespace dtrain::compress
