#include "dtrain/metrics/alternating_cost.h"

#include <gtest/gtest.h>

namespace dtrain::metrics {
namespace {

// Runs steps of the given seconds for the side each falls on: off_s for off steps, on_s
// for on steps, in the order next_on() asks for.
void run(AlternatingCost& c, const std::vector<std::pair<double, double>>& pairs,
         int64_t samples = 64) {
  for (const auto& [off_s, on_s] : pairs) {
    for (int i = 0; i < 2; ++i)
      c.record(c.next_on() ? on_s : off_s, samples);
  }
}

TEST(AlternatingCostTest, StepsGoOffOnOnOffSoEachPairHasOneOfEach) {
  AlternatingCost c;
  std::vector<bool> order;
  for (int i = 0; i < 8; ++i) {
    order.push_back(c.next_on());
    c.record(1.0, 64);
  }
  EXPECT_EQ(order, (std::vector<bool>{false, true, true, false, false, true, true, false}));
  c.reset();
  EXPECT_FALSE(c.next_on());
}

TEST(AlternatingCostTest, CostIsTheMeanPairedDifferenceOverTheMeanOffStep) {
  AlternatingCost c;
  // The first pair is warm-up (slow, and not counted); then differences 0.1 and 0.3 on
  // off steps of 1.0 and 2.0 s.
  run(c, {{50.0, 90.0}, {1.0, 1.1}, {2.0, 2.3}});
  const auto s = c.summary();
  EXPECT_EQ(s.pairs, 2);
  EXPECT_DOUBLE_EQ(s.off_s, 1.5);
  EXPECT_DOUBLE_EQ(s.on_s, 1.7);
  EXPECT_NEAR(s.cost, 0.2 / 1.5, 1e-12);
  // Differences 0.1, 0.3: sample sd 0.1414..., standard error 0.1.
  EXPECT_NEAR(s.cost_ci95, 1.96 * 0.1 / 1.5, 1e-12);
}

TEST(AlternatingCostTest, AShortBatchPairAndTooFewPairsAreNotCounted) {
  AlternatingCost c;
  run(c, {{1.0, 1.0}, {1.0, 1.5}});
  c.record(9.0, 10);  // a short last batch: its pair has unequal samples
  c.record(1.0, 64);
  const auto s = c.summary();
  EXPECT_EQ(s.pairs, 1);
  EXPECT_DOUBLE_EQ(s.cost, 0.5);
  EXPECT_EQ(s.cost_ci95, 0.0);  // one pair: no spread to measure
  c.reset();
  EXPECT_EQ(c.summary().pairs, 0);
  EXPECT_EQ(c.summary().cost, 0.0);
}

}  // namespace
}  // namespace dtrain::metrics
