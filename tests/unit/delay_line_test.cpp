// netlab::DelayLine (delay_line.h): what the impairer does to each packet, on a made-up clock.
#include "dtrain/netlab/delay_line.h"

#include <gtest/gtest.h>

#include <cmath>

namespace dtrain::netlab {
namespace {

using namespace std::chrono_literals;
using Clock = DelayLine::Clock;

TEST(DelayLineTest, HoldsEveryPacketForExactlyTheDelayInArrivalOrder) {
  DelayLine line(5.0, 0.0, 1);
  const Clock::time_point t0{};
  EXPECT_FALSE(line.next_due().has_value());
  for (uint32_t id = 0; id < 4; ++id)
    ASSERT_TRUE(line.arrive(id, t0 + id * 1ms));
  EXPECT_EQ(line.held(), 4u);
  EXPECT_EQ(*line.next_due(), t0 + 5ms);
  EXPECT_TRUE(line.release(t0 + 5ms - 1ns).empty());
  auto out = line.release(t0 + 6ms);  // ids 0 and 1 are due (5 and 6 ms)
  EXPECT_EQ(out, (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(*line.next_due(), t0 + 7ms);
  out = line.release(t0 + 1s);
  EXPECT_EQ(out, (std::vector<uint32_t>{2, 3}));
  EXPECT_EQ(line.held(), 0u);
}

TEST(DelayLineTest, ZeroDelayReleasesAtOnce) {
  DelayLine line(0.0, 0.0, 1);
  const Clock::time_point t0{};
  ASSERT_TRUE(line.arrive(7, t0));
  ASSERT_EQ(line.release(t0).size(), 1u);
}

TEST(DelayLineTest, LosesTheSetShareOfPacketsAndTheSeedFixesWhich) {
  const int n = 200000;
  auto lost_ids = [n](double percent, uint64_t seed) {
    DelayLine line(1.0, percent, seed);
    std::vector<uint32_t> lost;
    for (uint32_t id = 0; id < static_cast<uint32_t>(n); ++id)
      if (!line.arrive(id, Clock::time_point{})) lost.push_back(id);
    EXPECT_EQ(line.held() + lost.size(), static_cast<size_t>(n));
    return lost;
  };
  EXPECT_TRUE(lost_ids(0.0, 3).empty());
  const auto two = lost_ids(2.0, 3);
  // Binomial(200000, 0.02): mean 4000, sd 62.6; 5 sd either side.
  EXPECT_NEAR(static_cast<double>(two.size()), 4000.0, 5 * std::sqrt(n * 0.02 * 0.98));
  EXPECT_EQ(two, lost_ids(2.0, 3));
  EXPECT_NE(two, lost_ids(2.0, 4));
}

TEST(DelayLineTest, RefusesImpossibleSettings) {
  EXPECT_THROW(DelayLine(-1.0, 0.0, 1), std::invalid_argument);
  EXPECT_THROW(DelayLine(NAN, 0.0, 1), std::invalid_argument);
  EXPECT_THROW(DelayLine(1.0, 100.0, 1), std::invalid_argument);
  EXPECT_THROW(DelayLine(1.0, -0.5, 1), std::invalid_argument);
}

}  // namespace
}  // namespace dtrain::netlab
