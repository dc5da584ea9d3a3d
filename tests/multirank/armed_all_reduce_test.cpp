// The armed all-reduce (receives posted before the data exists) against the float64 oracle
// (integer-valued inputs make it exact), for 1..5 ranks, awkward counts and the three ways
// a caller may use it: armed long before, armed late by some ranks only, not armed at all.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "../support/ranks.h"
#include "dtrain/comm/armed_all_reduce.h"
#include "dtrain/comm/exact_oracle.h"
#include "dtrain/comm/group.h"

namespace dtrain::comm {
namespace {

class ArmedAllReduceTest : public ::testing::TestWithParam<int> {};

TEST_P(ArmedAllReduceTest, IsExactWhenEverArmedAndIdenticalOnEveryRank) {
  const int world = GetParam();
  testing::run_ranks(world, [&](Group& g) {
    for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{world - 1}, int64_t{37}, int64_t{4099},
                          int64_t{300000}}) {
      if (count < 0) continue;
      ArmedAllReduce armed(g, count, 11, 12);
      // Run 0: armed early. Run 1: rank 1 arms late, after the others have sent. Run 2: no
      // arm() at all. Each run reuses the object, as DDP does every step.
      for (int run = 0; run < 3; ++run) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
          if (run == 0) armed.arm();
          if (run == 1) {
            if (g.rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(20));
            armed.arm();
          }
          at::Tensor x = exact_input(g.rank(), run, count, op).to(at::kFloat);
          armed.run(x, op);
          EXPECT_FALSE(armed.armed());
          const at::Tensor want = exact_reduction(world, run, count, op, at::kFloat).to(at::kFloat);
          EXPECT_EQ(x.ne(want).sum().item<int64_t>(), 0)
              << "rank " << g.rank() << "/" << world << " count " << count << " run " << run
              << " op " << to_string(op);
        }
      }
    }
  });
}

TEST_P(ArmedAllReduceTest, NonIntegerSumsAreBitIdenticalAcrossRanks) {
  const int world = GetParam();
  std::vector<at::Tensor> inputs;
  for (int r = 0; r < world; ++r)
    inputs.push_back(at::randn({100003}, at::TensorOptions().dtype(at::kFloat)) * (r + 1));
  std::vector<at::Tensor> results(static_cast<size_t>(world));
  testing::run_ranks(world, [&](Group& g) {
    ArmedAllReduce armed(g, 100003, 3, 4);
    armed.arm();
    at::Tensor x = inputs[static_cast<size_t>(g.rank())].clone();
    armed.run(x, ReduceOp::kAvg);
    results[static_cast<size_t>(g.rank())] = x;
  });
  at::Tensor sum = inputs[0].to(at::kDouble);
  for (int r = 1; r < world; ++r)
    sum += inputs[static_cast<size_t>(r)].to(at::kDouble);
  const at::Tensor mean = sum / world;
  for (int r = 0; r < world; ++r) {
    EXPECT_TRUE(at::equal(results[static_cast<size_t>(r)], results[0])) << "rank " << r;
    EXPECT_LT((results[static_cast<size_t>(r)].to(at::kDouble) - mean).abs().max().item<double>(),
              1e-5);
  }
}

// DDP's pattern: every bucket armed when backward starts, each started as it completes,
// finished in order later; the second starts before the first finishes.
TEST_P(ArmedAllReduceTest, OverlappingRunsOfTwoBucketsAreEachExact) {
  const int world = GetParam();
  testing::run_ranks(world, [&](Group& g) {
    ArmedAllReduce first(g, 5000, 21, 22), second(g, 777, 23, 24);
    for (int step = 0; step < 3; ++step) {
      first.arm();
      second.arm();
      at::Tensor a = exact_input(g.rank(), step, 5000, ReduceOp::kSum).to(at::kFloat);
      at::Tensor b = exact_input(g.rank(), step + 7, 777, ReduceOp::kSum).to(at::kFloat);
      first.start(a);
      second.start(b);
      EXPECT_TRUE(first.started());
      first.finish(a, ReduceOp::kSum);
      second.finish(b, ReduceOp::kSum);
      EXPECT_TRUE(at::equal(
          a, exact_reduction(world, step, 5000, ReduceOp::kSum, at::kFloat).to(at::kFloat)))
          << "rank " << g.rank() << " step " << step;
      EXPECT_TRUE(at::equal(
          b, exact_reduction(world, step + 7, 777, ReduceOp::kSum, at::kFloat).to(at::kFloat)))
          << "rank " << g.rank() << " step " << step;
    }
    at::Tensor c = at::zeros({5000});
    first.start(c);
    EXPECT_THROW(first.start(c), std::logic_error);
    first.finish(c, ReduceOp::kSum);
  });
}

TEST(ArmedAllReduceBadInputTest, AWrongBufferIsRefusedBeforeAnythingCrosses) {
  testing::run_ranks(2, [&](Group& g) {
    ArmedAllReduce armed(g, 10, 5, 6);
    at::Tensor wrong_count = at::zeros({9});
    EXPECT_THROW(armed.run(wrong_count, ReduceOp::kSum), std::invalid_argument);
    at::Tensor wrong_type = at::zeros({10}, at::kDouble);
    EXPECT_THROW(armed.run(wrong_type, ReduceOp::kSum), std::invalid_argument);
    // Still usable: nothing was armed or sent.
    at::Tensor ok = at::full({10}, static_cast<float>(g.rank() + 1));
    armed.run(ok, ReduceOp::kSum);
    EXPECT_TRUE(at::equal(ok, at::full({10}, 3.0f)));
  });
}

INSTANTIATE_TEST_SUITE_P(Worlds, ArmedAllReduceTest, ::testing::Values(1, 2, 3, 4, 5));

}  // namespace
}  // namespace dtrain::comm
