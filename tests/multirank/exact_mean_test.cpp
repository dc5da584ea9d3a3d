// exact_means (parallel/exact_mean.h): tensors averaged in place in one message, each equal
// to its float64 mean (integer-valued inputs make the float32 result exact), an undefined one
// skipped, and bit-identical on every rank for any inputs, for 1..4 ranks.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <vector>

#include "../support/ranks.h"
#include "dtrain/comm/group.h"
#include "dtrain/parallel/exact_mean.h"

namespace dtrain::parallel {
namespace {

// Rank r's values: multiples of the world's size below 10^4, so that every sum and mean is
// an integer float32 holds.
at::Tensor integer_values(int rank, int world, int64_t count, int salt) {
  return (at::arange(count, at::kDouble) * (rank + 1) + salt * 7 - rank * 3).remainder(1000) *
         world;
}

class ExactMeanTest : public ::testing::TestWithParam<int> {};

TEST_P(ExactMeanTest, BothTensorsEqualTheirFloat64MeansInOneCall) {
  const int world = GetParam();
  const int64_t n = 4099, m = 37;
  at::Tensor want_values = at::zeros({n}, at::kDouble), want_also = at::zeros({m}, at::kDouble);
  for (int r = 0; r < world; ++r) {
    want_values += integer_values(r, world, n, 1);
    want_also += integer_values(r, world, m, 2);
  }
  want_values /= world;
  want_also /= world;
  dtrain::testing::run_ranks(world, [&](comm::Group& g) {
    at::Tensor values = integer_values(g.rank(), world, n, 1).to(at::kFloat);
    at::Tensor also = integer_values(g.rank(), world, m, 2).to(at::kFloat);
    exact_means(g, {values, at::Tensor(), also});
    EXPECT_TRUE(at::equal(values.to(at::kDouble), want_values)) << "rank " << g.rank();
    EXPECT_TRUE(at::equal(also.to(at::kDouble), want_also)) << "rank " << g.rank();
    // Without a second tensor: the first alone.
    at::Tensor alone = integer_values(g.rank(), world, n, 1).to(at::kFloat);
    exact_means(g, {alone, at::Tensor()});
    EXPECT_TRUE(at::equal(alone.to(at::kDouble), want_values));
  });
}

TEST_P(ExactMeanTest, AnyValuesEndBitIdenticalOnEveryRank) {
  const int world = GetParam();
  std::vector<at::Tensor> inputs;
  for (int r = 0; r < world; ++r)
    inputs.push_back(at::randn({10007}, at::kFloat) * (r + 1));
  std::vector<at::Tensor> results(static_cast<size_t>(world));
  dtrain::testing::run_ranks(world, [&](comm::Group& g) {
    const at::Tensor mine = inputs[static_cast<size_t>(g.rank())].clone();
    exact_means(g, {mine.narrow(0, 0, 10000), mine.narrow(0, 10000, 7)});
    results[static_cast<size_t>(g.rank())] = mine;
  });
  for (int r = 1; r < world; ++r)
    EXPECT_TRUE(at::equal(results[0], results[static_cast<size_t>(r)])) << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Worlds, ExactMeanTest, ::testing::Values(1, 2, 3, 4));

}  // namespace
}  // namespace dtrain::parallel
