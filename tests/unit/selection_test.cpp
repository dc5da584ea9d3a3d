// compress::order_statistics (selection.h) against a sorted copy: both second passes
// (counting low key bits when the wanted buckets hold many values, gathering and sorting
// when they hold few), ties, signed zeros, many ranks, NaN; on one thread and on three.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "dtrain/compress/selection.h"

namespace dtrain::compress {
namespace {

std::vector<int64_t> spread_ranks(int64_t n, int count) {
  std::vector<int64_t> ranks;
  for (int k = 0; k < count; ++k)
    ranks.push_back(k * (n - 1) / std::max(1, count - 1));
  std::reverse(ranks.begin(), ranks.end());  // any order, repeats allowed
  ranks.push_back(ranks.front());
  return ranks;
}

void expect_like_sorting(const std::vector<float>& x, const std::vector<int64_t>& ranks) {
  std::vector<float> sorted = x;
  std::sort(sorted.begin(), sorted.end(), [](float a, float b) {
    return order_key(a) < order_key(b);  // -0 before +0, as the keys order them
  });
  for (const int threads : {1, 3}) {  // 1M values and more run in chunks on 3 threads
    const std::vector<float> got =
        order_statistics(x.data(), static_cast<int64_t>(x.size()), ranks, threads);
    ASSERT_EQ(got.size(), ranks.size());
    for (size_t w = 0; w < ranks.size(); ++w) {
      const float want = sorted[static_cast<size_t>(ranks[w])];
      EXPECT_EQ(order_key(got[w]), order_key(want))
          << "rank " << ranks[w] << ", " << threads << " threads";
    }
  }
}

std::vector<float> sample(int64_t n, bool relu, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal;
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x)
    v = relu ? std::max(0.f, normal(gen)) : normal(gen);
  return x;
}

TEST(OrderStatistics, ReluPinsTheZeroBucketWithoutCountingIt) {
  // Half the values are +0: that bucket holds nothing else, so its ranks need no second
  // pass; the ranks among the positive values still get one.
  const auto x = sample(1 << 20, true, 1);
  expect_like_sorting(x, spread_ranks(1 << 20, 9));
  std::vector<float> negative_zeros(5000, -0.f);  // -0 alone, and -0 beside +0
  expect_like_sorting(negative_zeros, {0, 4999, 2500});
  for (size_t i = 0; i < negative_zeros.size(); i += 2)
    negative_zeros[i] = 0.f;
  expect_like_sorting(negative_zeros, spread_ranks(5000, 9));
}

TEST(OrderStatistics, ACrowdedBucketOfDistinctValuesCountsItsLowBits) {
  // Half the values share one bucket (1 + up to 2^-8: the same top 16 key bits) but differ
  // below: crowded, not constant, so the low bits are counted. Zeros beside positive
  // denormals (one bucket, not all zero) take the same way.
  std::mt19937 gen(5);
  std::uniform_real_distribution<float> in_bucket(1.f, 1.f + 1.f / 256), wide(-4.f, 4.f);
  std::vector<float> x(1 << 20);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = i % 2 ? in_bucket(gen) : wide(gen);
  expect_like_sorting(x, spread_ranks(1 << 20, 9));
  std::vector<float> zeros_and_denormals(1 << 16, 0.f);
  for (size_t i = 0; i < zeros_and_denormals.size(); i += 3)
    zeros_and_denormals[i] = std::numeric_limits<float>::denorm_min() * static_cast<float>(i % 7);
  expect_like_sorting(zeros_and_denormals, spread_ranks(1 << 16, 9));
}

TEST(OrderStatistics, DenseBucketsAreCountedWithoutACrowd) {
  // Uniform in [1, 2): 128 buckets of ~8K values; three wanted buckets hold too many values
  // to gather cheaply, too few to be crowded.
  std::mt19937 gen(4);
  std::uniform_real_distribution<float> uniform(1.f, 2.f);
  std::vector<float> x(1 << 20);
  for (auto& v : x)
    v = uniform(gen);
  expect_like_sorting(x, {0, 1000, (1 << 20) - 1});
}

TEST(OrderStatistics, GaussianGathersTheFewValuesOfTheWantedBuckets) {
  // Four ranks in a spread of ~2000 occupied buckets: a few thousand values to gather.
  const auto x = sample(1 << 20, false, 2);
  expect_like_sorting(x, {0, (1 << 20) / 3, (1 << 20) / 2, (1 << 20) - 1});
}

TEST(OrderStatistics, ManyRanksSmallInputsTiesAndSignedZeros) {
  expect_like_sorting(sample(1 << 16, false, 3), spread_ranks(1 << 16, 4096));
  expect_like_sorting({3.f}, {0, 0});
  expect_like_sorting(std::vector<float>(1000, 1.5f), {0, 999, 500});
  std::vector<float> zeros;
  for (int i = 0; i < 4000; ++i)
    zeros.push_back(i % 3 == 0 ? -0.f : (i % 3 == 1 ? 0.f : -1e-40f));  // a denormal too
  expect_like_sorting(zeros, spread_ranks(4000, 17));
  const float big = std::numeric_limits<float>::max();
  expect_like_sorting({big, -big, 0.f, std::numeric_limits<float>::denorm_min()}, {0, 1, 2, 3});
}

TEST(OrderStatistics, NonFiniteInputAndBadRanksAreErrors) {
  std::vector<float> x(100, 1.f);
  x[57] = std::nanf("");
  EXPECT_THROW(order_statistics(x.data(), 100, {0}), std::invalid_argument);
  x[57] = -std::numeric_limits<float>::infinity();
  EXPECT_THROW(order_statistics(x.data(), 100, {0}), std::invalid_argument);
  x[57] = 1.f;
  EXPECT_THROW(order_statistics(x.data(), 100, {100}), std::out_of_range);
  EXPECT_THROW(order_statistics(x.data(), 100, {-1}), std::out_of_range);
}

}  // namespace
}  // namespace dtrain::compress
