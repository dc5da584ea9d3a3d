// Every algorithm x op x dtype x world size 1..8 x awkward counts, against an expected
// result computed independently in float64 (integer-valued inputs make it exact).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>

#include "../support/ranks.h"
#include "dtrain/comm/allreduce.h"
#include "dtrain/comm/exact_oracle.h"
#include "dtrain/comm/group.h"

namespace dtrain::comm {
namespace {

at::Tensor make_input(int rank, int64_t count, ReduceOp op) {
  return exact_input(rank, 0, count, op);
}

// The oracle computes in float64, independently of every algorithm under test.
at::Tensor expected_result(int world, int64_t count, ReduceOp op, at::ScalarType dtype) {
  return exact_reduction(world, 0, count, op, dtype).to(dtype);
}

std::vector<int64_t> awkward_counts(int world) {
  std::vector<int64_t> counts{0, 1, 2, 37, 1000, 4099};
  if (world > 2) counts.push_back(world - 1);
  counts.push_back(world + 1);
  return counts;
}

class AllReduceTest : public ::testing::TestWithParam<int> {};

TEST_P(AllReduceTest, EveryAlgoOpDtypeCountIsExact) {
  const int world = GetParam();
  const std::vector<at::ScalarType> dtypes{at::kFloat,    at::kDouble, at::kHalf,
                                           at::kBFloat16, at::kInt,    at::kLong};
  const std::vector<ReduceOp> ops{ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax,
                                  ReduceOp::kProduct};
  std::vector<Algorithm> algos = concrete_algorithms();
  algos.push_back(Algorithm::kAuto);
  testing::run_ranks(world, [&](Group& g) {
    for (Algorithm algo : algos) {
      for (ReduceOp op : ops) {
        for (at::ScalarType dtype : dtypes) {
          for (int64_t count : awkward_counts(world)) {
            for (int64_t segment : {int64_t{24}, int64_t{512 * 1024}}) {
              if (segment != 512 * 1024 && algo != Algorithm::kRing) continue;
              at::Tensor x = make_input(g.rank(), count, op).to(dtype);
              AllReduceOptions opts;
              opts.op = op;
              opts.algorithm = algo;
              opts.segment_bytes = segment;
              all_reduce(g, x, opts);
              const at::Tensor want = expected_result(world, count, op, dtype);
              const int64_t wrong = x.ne(want).sum().item<int64_t>();
              EXPECT_EQ(wrong, 0) << "rank " << g.rank() << "/" << world << " algo "
                                  << to_string(algo) << " op " << to_string(op) << " dtype "
                                  << dtype << " count " << count << " segment " << segment;
            }
          }
        }
      }
    }
  });
}

TEST_P(AllReduceTest, LargeFloatVectorWithNonIntegerValuesIsIdenticalOnAllRanks) {
  const int world = GetParam();
  const int64_t count = (1 << 18) + 3;  // > 1 MiB: ring segments, butterfly halving
  std::vector<at::Tensor> results(static_cast<size_t>(world) * 4);
  std::vector<at::Tensor> inputs;
  at::Tensor reference = at::zeros({count}, at::kDouble);
  at::manual_seed(100);  // the global generator is not per thread: draw inputs up front
  for (int r = 0; r < world; ++r) {
    inputs.push_back(at::randn({count}, at::kFloat));
    reference += inputs.back().to(at::kDouble);
  }
  testing::run_ranks(world, [&](Group& g) {
    int slot = 0;
    for (Algorithm algo : concrete_algorithms()) {
      at::Tensor x = inputs[static_cast<size_t>(g.rank())].clone();
      AllReduceOptions opts;
      opts.algorithm = algo;
      all_reduce(g, x, opts);
      results[static_cast<size_t>(g.rank() * 4 + slot++)] = x;
    }
  });
  for (int slot = 0; slot < 4; ++slot) {
    const std::string algo = to_string(concrete_algorithms()[static_cast<size_t>(slot)]);
    const double diff =
        (results[static_cast<size_t>(slot)].to(at::kDouble) - reference).abs().max().item<double>();
    EXPECT_LT(diff, 1e-5 * world) << algo;
    for (int r = 1; r < world; ++r) {
      EXPECT_TRUE(
          at::equal(results[static_cast<size_t>(slot)], results[static_cast<size_t>(r * 4 + slot)]))
          << algo << ": rank " << r << " differs from rank 0";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, AllReduceTest, ::testing::Range(1, 9),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

}  // namespace
}  // namespace dtrain::comm
