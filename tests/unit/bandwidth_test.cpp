// The measurement formulas (docs/measurement.md), checked on hand-computed values.
#include <gtest/gtest.h>

#include "dtrain/metrics/bandwidth.h"
#include "dtrain/metrics/scaling.h"

namespace dtrain::metrics {
namespace {

TEST(BandwidthTest, BusFactorsFollowNcclTests) {
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveKind::kAllReduce, 1), 0.0);
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveKind::kAllReduce, 2), 1.0);
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveKind::kAllReduce, 4), 1.5);
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveKind::kReduceScatter, 4), 0.75);
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveKind::kAllGather, 8), 0.875);
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveKind::kBroadcast, 8), 1.0);
  EXPECT_THROW(bus_factor(CollectiveKind::kAllReduce, 0), std::invalid_argument);
}

TEST(BandwidthTest, AlgorithmBandwidthAndRingTraffic) {
  EXPECT_DOUBLE_EQ(algbw_gbps(2e9, 0.5), 4.0);
  EXPECT_DOUBLE_EQ(algbw_gbps(1e9, 0.0), 0.0);
  EXPECT_EQ(ring_allreduce_traffic(1000, 1), 0);
  EXPECT_EQ(ring_allreduce_traffic(1000, 2), 1000);
  EXPECT_EQ(ring_allreduce_traffic(1000, 4), 1500);
  EXPECT_EQ(ring_allreduce_traffic(1000, 3), 1333);  // 2 * 1000 * 2 / 3, rounded down
}

TEST(BandwidthTest, ScalingStudyUsesTheSameDefinitions) {
  ScalingRun one, two;
  one.ranks = 1;
  one.batch = two.batch = 32;
  one.epoch_s = 10;
  two.ranks = 2;
  two.epoch_s = 8;
  two.steps = 100;
  two.model_bytes = 4'000'000;
  two.comm_total_s = 2;
  const auto rows = scaling_rows({one, two});
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_DOUBLE_EQ(rows[1]["speedup_epoch"].get<double>(), 10.0 / 8);
  EXPECT_DOUBLE_EQ(rows[1]["speedup_weak"].get<double>(), 2 * 10.0 / 8);
  EXPECT_DOUBLE_EQ(rows[1]["comm_inferred_s"].get<double>(), 8 - 10.0 / 2);
  // 2 * 4e6 * (2-1)/2 bytes per step, 100 steps, 2 s.
  EXPECT_DOUBLE_EQ(rows[1]["bandwidth_gbps"].get<double>(), 4e6 * 100 / 2 / 1e9);
}

}  // namespace
}  // namespace dtrain::metrics
