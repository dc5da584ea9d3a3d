#include "dtrain/compress/selection.h"

#include <algorithm>
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

  // Which bucket holds each wanted rank, and the rank's position inside that bucket.
  std::vector<int64_t> order(ranks.size());
  for (size_t i = 0; i < order.size(); ++i)
    order[i] = static_cast<int64_t>(i);
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return ranks[a] < ranks[b]; });
  std::vector<int32_t> slot_of_bucket(kBuckets, -1);
  std::vector<size_t> slot_bucket;
  std::vector<std::pair<int64_t, size_t>> wanted;  // (rank inside bucket, result index)
  std::vector<size_t> wanted_slot;
  int64_t below = 0;
  size_t bucket = 0;
  for (int64_t idx : order) {
    const int64_t rank = ranks[static_cast<size_t>(idx)];
    while (below + counts[bucket] <= rank)
      below += counts[bucket++];
    if (slot_of_bucket[bucket] < 0) {
      slot_of_bucket[bucket] = static_cast<int32_t>(slot_bucket.size());
      slot_bucket.push_back(bucket);
    }
    wanted.emplace_back(rank - below, static_cast<size_t>(idx));
    wanted_slot.push_back(static_cast<size_t>(slot_of_bucket[bucket]));
  }

  std::vector<std::vector<float>> gathered(slot_bucket.size());
  for (size_t s = 0; s < slot_bucket.size(); ++s)
    gathered[s].reserve(counts[slot_bucket[s]]);
  for (int64_t i = 0; i < n; ++i) {
    const int32_t s = slot_of_bucket[order_key(x[i]) >> kShift];
    if (s >= 0) gathered[static_cast<size_t>(s)].push_back(x[i]);
  }

  // Wanted ranks come in ascending order per bucket: each selection narrows the next.
  std::vector<int64_t> done_upto(slot_bucket.size(), 0);
  for (size_t w = 0; w < wanted.size(); ++w) {
    auto& values = gathered[wanted_slot[w]];
    const int64_t local = wanted[w].first;
    int64_t& from = done_upto[wanted_slot[w]];
    auto begin = values.begin() + from;
    auto nth = values.begin() + local;
    if (nth >= begin) {
      std::nth_element(begin, nth, values.end(),
                       [](float a, float b) { return order_key(a) < order_key(b); });
      from = local;
    }
    result[wanted[w].second] = *nth;
  }
  return result;
}

}  // namespace dtrain::compress
