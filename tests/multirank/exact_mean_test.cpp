// exact_mean_with (parallel/exact_mean.h): two tensors averaged in one message, each equal to
// its float64 mean (integer-valued inputs make the float32 result exact) and bit-identical
// on every rank for any inputs, for 1..4 ranks.
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
    const at::Tensor values = integer_values(g.rank(), world, n, 1).to(at::kFloat);
    const at::Tensor also = integer_values(g.rank(), world, m, 2).to(at::kFloat);
    const auto [mean, also_mean] = exact_mean_with(g, values, also);
    EXPECT_TRUE(at::equal(mean.to(at::kDouble), want_values)) << "rank " << g.rank();
    EXPECT_TRUE(at::equal(also_mean.to(at::kDouble), want_also)) << "rank " << g.rank();
    EXPECT_TRUE(at::equal(values, integer_values(g.rank(), world, n, 1).to(at::kFloat)))
        << "the input changed";
    // Without a second tensor: the first alone, the second left undefined.
    const auto [alone, none] = exact_mean_with(g, values, at::Tensor());
    EXPECT_TRUE(at::equal(alone.to(at::kDouble), want_values));
    EXPECT_FALSE(none.defined());
  });
}

TEST_P(ExactMeanTest, AnyValuesEndBitIdenticalOnEveryRank) {
  const int world = GetParam();
  std::vector<at::Tensor> inputs;
  for (int r = 0; r < world; ++r)
    inputs.push_back(at::randn({10007}, at::kFloat) * (r + 1));
  std::vector<at::Tensor> results(static_cast<size_t>(world));
  dtrain::testing::run_ranks(world, [&](comm::Group& g) {
    const at::Tensor& mine = inputs[static_cast<size_t>(g.rank())];
    results[static_cast<size_t>(g.rank())] =
        exact_mean_with(g, mine.narrow(0, 0, 10000), mine.narrow(0, 10000, 7)).first;
  });
  for (int r = 1; r < world; ++r)
    EXPECT_TRUE(at::equal(results[0], results[static_cast<size_t>(r)])) << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Worlds, ExactMeanTest, ::testing::Values(1, 2, 3, 4));

}  // namespace
}  // namespace dtrain::parallel
