#include "dtrain/compress/selection.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <stdexcept>

#include "dtrain/compress/chunks.h"

namespace dtrain::compress {
namespace {

constexpr int kShift = 16;
constexpr size_t kBuckets = size_t{1} << (32 - kShift);
constexpr size_t kLowValues = size_t{1} << kShift;

float from_key(uint32_t key) {
  const uint32_t bits = (key & 0x80000000u) ? (key & 0x7FFFFFFFu) : ~key;  // invert order_key
  float v;
  std::memcpy(&v, &bits, 4);
  return v;
}

// counts[index(order_key(x[i]))] over x[0, n), into `size` counters. Even and odd positions
// count into two arrays, merged at the end: a key that repeats (ReLU's zeros) then chains
// each increment on the one two back, not on the previous one.
template <class Index>
std::vector<uint32_t> count_keys(const float* x, int64_t n, size_t size, Index index) {
  std::vector<uint32_t> counts(2 * size, 0);
  uint32_t* const even = counts.data();
  uint32_t* const odd = even + size;
  int64_t i = 0;
  for (; i + 2 <= n; i += 2) {
    ++even[index(order_key(x[i]))];
    ++odd[index(order_key(x[i + 1]))];
  }
  if (i < n) ++even[index(order_key(x[i]))];
  for (size_t k = 0; k < size; ++k)
    even[k] += odd[k];
  counts.resize(size);
  return counts;
}

// The entry-by-entry sum of the count arrays count(begin, end) makes for each chunk of
// [0, n): one pass over the values on several threads.
template <class Count>
std::vector<uint32_t> summed_over_chunks(int64_t n, int chunks, const Count& count) {
  if (chunks <= 1) return count(0, n);
  std::vector<std::vector<uint32_t>> part(static_cast<size_t>(chunks));
  for_each_chunk(n, chunks, [&](const Chunk& c) {
    part[static_cast<size_t>(c.index)] = count(c.begin, c.end);
  });
  std::vector<uint32_t>& sum = part[0];
  for (size_t c = 1; c < part.size(); ++c) {
    for (size_t k = 0; k < sum.size(); ++k)
      sum[k] += part[c][k];
  }
  return std::move(sum);
}

constexpr uint32_t kPositiveZeroKey = 0x80000000u, kNegativeZeroKey = 0x7FFFFFFFu;

// Whether the bucket of +0 (or of -0) holds that zero only: none of the 2^16 - 1 tiny
// denormals that share its top key bits. A streaming pass the compiler vectorizes.
bool bucket_holds_only_zero(const float* x, int64_t n, uint32_t zero_key, int chunks) {
  const uint32_t zero_bits = zero_key == kPositiveZeroKey ? 0u : 0x80000000u;
  std::vector<uint32_t> others(static_cast<size_t>(chunks), 0);
  for_each_chunk(n, chunks, [&](const Chunk& c) {
    uint32_t found = 0;
    for (int64_t i = c.begin; i < c.end; ++i) {
      uint32_t bits;
      std::memcpy(&bits, x + i, 4);
      found |= static_cast<uint32_t>(bits - zero_bits - 1u < 0xFFFFu);
    }
    others[static_cast<size_t>(c.index)] = found;
  });
  return std::all_of(others.begin(), others.end(), [](uint32_t found) { return found == 0; });
}

// Where the wanted ranks fall after the first pass: each rank's bucket and the rank's
// offset inside it, and the distinct buckets ("slots") in first-seen order.
struct Located {
  std::vector<size_t> bucket_of;
  std::vector<int64_t> offset_in_bucket;
  std::vector<size_t> wanted;
  std::vector<int32_t> slot_of_bucket;  // -1 for buckets nobody asked for
};

Located locate(const std::vector<uint32_t>& counts, const std::vector<int64_t>& ranks) {
  Located at;
  at.bucket_of.resize(ranks.size());
  at.offset_in_bucket.resize(ranks.size());
  at.slot_of_bucket.assign(kBuckets, -1);
  std::vector<size_t> order(ranks.size());
  for (size_t w = 0; w < order.size(); ++w)
    order[w] = w;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ranks[a] < ranks[b]; });
  size_t bucket = 0;
  int64_t below = 0;  // values in buckets before `bucket`
  for (const size_t w : order) {
    while (below + counts[bucket] <= ranks[w])
      below += counts[bucket++];
    at.bucket_of[w] = bucket;
    at.offset_in_bucket[w] = ranks[w] - below;
    if (at.slot_of_bucket[bucket] < 0) {
      at.slot_of_bucket[bucket] = static_cast<int32_t>(at.wanted.size());
      at.wanted.push_back(bucket);
    }
  }
  return at;
}

// Second pass, histogram: the low 16 key bits of the values in the wanted buckets pin each
// rank to one full key. Costs a 256 KiB count array per wanted bucket, whatever n is.
// `crowded`: the wanted buckets hold many of the values (ReLU's zeros).
std::vector<float> select_by_low_counts(const float* x, int64_t n, Located& at, bool crowded,
                                        int chunks) {
  std::vector<int32_t>& slot_of_bucket = at.slot_of_bucket;
  const size_t slot_values = (at.wanted.size() + 1) * kLowValues;
  auto low_index = [&](uint32_t key) {
    const auto slot = static_cast<uint32_t>(slot_of_bucket[key >> kShift]);
    return static_cast<size_t>(slot) * kLowValues + (key & 0xFFFF);
  };
  std::vector<uint32_t> low_counts;
  if (!crowded) {  // a branch on "wanted?" that is nearly always "no" predicts well
    low_counts = summed_over_chunks(n, chunks, [&](int64_t begin, int64_t end) {
      std::vector<uint32_t> counts(slot_values, 0);
      for (int64_t i = begin; i < end; ++i) {
        const uint32_t key = order_key(x[i]);
        if (slot_of_bucket[key >> kShift] >= 0) ++counts[low_index(key)];
      }
      return counts;
    });
  } else {
    // Crowded, the branch would mispredict (ReLU's zeros sit at random places): every other
    // bucket counts into one more slot that nobody reads.
    std::replace(slot_of_bucket.begin(), slot_of_bucket.end(), -1,
                 static_cast<int32_t>(at.wanted.size()));
    low_counts = summed_over_chunks(n, chunks, [&](int64_t begin, int64_t end) {
      return count_keys(x + begin, end - begin, slot_values, low_index);
    });
  }

  std::vector<float> result(at.bucket_of.size());
  for (size_t w = 0; w < result.size(); ++w) {
    const size_t b = at.bucket_of[w];
    const uint32_t* sub = low_counts.data() + static_cast<size_t>(slot_of_bucket[b]) * kLowValues;
    int64_t remaining = at.offset_in_bucket[w];
    uint32_t low = 0;
    while (remaining >= sub[low])
      remaining -= sub[low++];
    result[w] = from_key((static_cast<uint32_t>(b) << kShift) | low);
  }
  return result;
}

// Second pass, gathering: the keys of the values in the wanted buckets, sorted. Costs
// m log m for the m values gathered; no per-bucket memory.
std::vector<float> select_by_gathering(const float* x, int64_t n,
                                       const std::vector<uint32_t>& counts, const Located& at,
                                       int chunks) {
  std::vector<size_t> buckets = at.wanted;
  std::sort(buckets.begin(), buckets.end());
  std::vector<int64_t> gathered_before(buckets.size());  // by slot: keys of lower buckets
  int64_t m = 0;
  for (const size_t b : buckets) {
    gathered_before[static_cast<size_t>(at.slot_of_bucket[b])] = m;
    m += counts[b];
  }
  std::vector<std::vector<uint32_t>> part(static_cast<size_t>(chunks));
  for_each_chunk(n, chunks, [&](const Chunk& c) {
    std::vector<uint32_t>& keys = part[static_cast<size_t>(c.index)];
    keys.reserve(static_cast<size_t>(m / chunks));
    for (int64_t i = c.begin; i < c.end; ++i) {
      const uint32_t key = order_key(x[i]);
      if (at.slot_of_bucket[key >> kShift] >= 0) keys.push_back(key);
    }
  });
  std::vector<uint32_t> keys = std::move(part[0]);
  keys.reserve(static_cast<size_t>(m));
  for (size_t c = 1; c < part.size(); ++c)
    keys.insert(keys.end(), part[c].begin(), part[c].end());
  std::sort(keys.begin(), keys.end());
  std::vector<float> result(at.bucket_of.size());
  for (size_t w = 0; w < result.size(); ++w) {
    const size_t b = at.bucket_of[w];
    const int64_t before = gathered_before[static_cast<size_t>(at.slot_of_bucket[b])];
    result[w] = from_key(keys[static_cast<size_t>(before + at.offset_in_bucket[w])]);
  }
  return result;
}

}  // namespace

std::vector<float> order_statistics(const float* x, int64_t n, const std::vector<int64_t>& ranks,
                                    int threads) {
  for (int64_t r : ranks) {
    if (r < 0 || r >= n) throw std::out_of_range("order_statistics: rank out of range");
  }
  const int chunks = chunk_count(n, threads, kMinEncodeChunk);
  const std::vector<uint32_t> counts = summed_over_chunks(n, chunks, [&](int64_t b, int64_t e) {
    return count_keys(x + b, e - b, kBuckets, [](uint32_t key) { return key >> kShift; });
  });
  if (has_non_finite(counts.data(), kShift)) {
    throw std::invalid_argument("input contains NaN or Inf; codecs take finite values only");
  }
  if (ranks.empty()) return {};

  // A wanted bucket crowded with +0 (or -0) and nothing else (ReLU's zeros: half the
  // values) pins its ranks without a second pass; checking that it holds nothing else
  // costs a streaming pass, far less than counting its low bits.
  std::vector<std::pair<size_t, uint32_t>> constant_buckets;
  const auto constant_key = [&](size_t bucket) -> std::optional<uint32_t> {
    for (const auto& [b, key] : constant_buckets)
      if (b == bucket) return key;
    return std::nullopt;
  };
  Located all = locate(counts, ranks);
  for (const uint32_t zero : {kPositiveZeroKey, kNegativeZeroKey}) {
    const size_t b = zero >> kShift;
    if (all.slot_of_bucket[b] >= 0 && int64_t{counts[b]} * 16 > n &&
        bucket_holds_only_zero(x, n, zero, chunks))
      constant_buckets.emplace_back(b, zero);
  }
  std::vector<float> result(ranks.size());
  Located rest;  // the ranks left for the second pass
  std::vector<size_t> rest_rank;
  rest.slot_of_bucket = std::move(all.slot_of_bucket);
  for (const size_t b : all.wanted) {
    if (constant_key(b)) {
      rest.slot_of_bucket[b] = -1;
      continue;
    }
    rest.slot_of_bucket[b] = static_cast<int32_t>(rest.wanted.size());
    rest.wanted.push_back(b);
  }
  for (size_t w = 0; w < ranks.size(); ++w) {
    if (const auto key = constant_key(all.bucket_of[w])) {
      result[w] = from_key(*key);
      continue;
    }
    rest.bucket_of.push_back(all.bucket_of[w]);
    rest.offset_in_bucket.push_back(all.offset_in_bucket[w]);
    rest_rank.push_back(w);
  }
  if (rest_rank.empty()) return result;

  // The second pass pins each rank to one full key. Which way is cheaper depends on how
  // many values the wanted buckets hold (m) and how many buckets there are: estimated in
  // value-sized operations (a count array costs its zeroing and its merge).
  double m = 0;
  for (const size_t b : rest.wanted)
    m += counts[b];
  const double histogram_cost = 0.5 * static_cast<double>((rest.wanted.size() + 1) * kLowValues);
  const double gathering_cost = 2.0 * m * std::log2(m + 2.0);
  const std::vector<float> found =
      gathering_cost < histogram_cost
          ? select_by_gathering(x, n, counts, rest, chunks)
          : select_by_low_counts(x, n, rest, m * 16 > static_cast<double>(n), chunks);
  for (size_t i = 0; i < rest_rank.size(); ++i)
    result[rest_rank[i]] = found[i];
  return result;
}

}  // namespace dtrain::compress
