// DDP's bucket assignment (parallel/bucket_assignment.h) against hand-worked cases and the
// rule it follows: reverse order, each bucket closed by the parameter that reaches its cap.
#include <gtest/gtest.h>

#include "dtrain/parallel/bucket_assignment.h"

namespace dtrain::parallel {
namespace {

using Buckets = std::vector<std::vector<size_t>>;

TEST(BucketAssignmentTest, ReverseOrderAndTheParameterThatCrossesTheCapStaysIn) {
  // Sizes 10, 20, 30, 40, 50 bytes; first cap 45, then 60.
  const std::vector<int64_t> bytes{10, 20, 30, 40, 50};
  const std::vector<bool> all(5, true);
  // 50 (>= 45 closes the first), then 40 + 30 (70 >= 60 closes), then 20 + 10 (open).
  EXPECT_EQ(assign_buckets(bytes, all, 45, 60), (Buckets{{4}, {3, 2}, {1, 0}}));
  // One large cap: everything in one bucket, output layer first.
  EXPECT_EQ(assign_buckets(bytes, all, 1000, 1000), (Buckets{{4, 3, 2, 1, 0}}));
  // A cap of one byte: a bucket per parameter.
  EXPECT_EQ(assign_buckets(bytes, all, 1, 1), (Buckets{{4}, {3}, {2}, {1}, {0}}));
}

TEST(BucketAssignmentTest, ParametersWithoutGradientsStayOut) {
  const std::vector<int64_t> bytes{10, 20, 30, 40};
  EXPECT_EQ(assign_buckets(bytes, {true, false, true, false}, 25, 25), (Buckets{{2}, {0}}));
  EXPECT_EQ(assign_buckets(bytes, {false, false, false, false}, 25, 25), Buckets{});
  EXPECT_EQ(assign_buckets({}, {}, 25, 25), Buckets{});
}

TEST(BucketAssignmentTest, EveryParameterWithAGradientLandsInExactlyOneBucket) {
  std::vector<int64_t> bytes;
  std::vector<bool> needs;
  for (int k = 0; k < 200; ++k) {
    bytes.push_back(4 * ((k * 7919) % 1000 + 1));
    needs.push_back(k % 9 != 0);
  }
  const Buckets buckets = assign_buckets(bytes, needs, 1 << 10, 1 << 12);
  std::vector<int> seen(bytes.size());
  size_t previous = bytes.size();
  for (size_t b = 0; b < buckets.size(); ++b) {
    int64_t total = 0;
    for (const size_t k : buckets[b]) {
      ++seen[k];
      EXPECT_LT(k, previous);  // strictly descending over the whole assignment
      previous = k;
      total += bytes[k];
    }
    // Every bucket but the last reached its cap, and without its last parameter it had not.
    if (b + 1 < buckets.size()) {
      const int64_t cap = b == 0 ? 1 << 10 : 1 << 12;
      EXPECT_GE(total, cap);
      EXPECT_LT(total - bytes[buckets[b].back()], cap);
    }
  }
  for (size_t k = 0; k < bytes.size(); ++k)
    EXPECT_EQ(seen[k], needs[k] ? 1 : 0) << k;
}

TEST(BucketAssignmentTest, BadCapsAndSizesAreErrors) {
  EXPECT_THROW(assign_buckets({4}, {true}, 0, 10), std::invalid_argument);
  EXPECT_THROW(assign_buckets({4}, {true}, 10, -1), std::invalid_argument);
  EXPECT_THROW(assign_buckets({4, 8}, {true}, 10, 10), std::invalid_argument);
}

}  // namespace
}  // namespace dtrain::parallel
