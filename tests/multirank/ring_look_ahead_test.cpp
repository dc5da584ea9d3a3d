// The ring's look-ahead (ring.cpp): on long links each step's receives are posted a step
// early, into staging of their own. Ranks as threads on loopback are told their links are
// long (Group::set_round_trip); every result is checked against a float64 sum.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>

#include "../support/ranks.h"
#include "dtrain/comm/algorithms.h"
#include "dtrain/comm/allreduce.h"
#include "dtrain/comm/collectives.h"
#include "dtrain/comm/group.h"
#include "dtrain/comm/world.h"

namespace dtrain::comm {
namespace {

constexpr double kLookAheadRoundTrip = 0.05;

at::Tensor look_ahead_values(int rank, int64_t count, at::ScalarType dtype) {
  return ((at::arange(count, at::kLong) * 3 + rank * 11) % 23 - 11).to(dtype);
}

at::Tensor look_ahead_sum(int world, int64_t count) {
  at::Tensor sum = at::zeros({count}, at::kDouble);
  for (int r = 0; r < world; ++r)
    sum += look_ahead_values(r, count, at::kDouble);
  return sum;
}

void set_round_trips_to(Group& g, double seconds) {
  for (int peer = 0; peer < g.size(); ++peer)
    if (peer != g.rank()) g.set_round_trip(peer, seconds);
}

// How the ranks see their links in one pass of the test.
struct LookAheadLinks {
  const char* name;
  bool only_even_ranks_long;  // else every link is long
  bool openings;
};

// all_reduce, reduce_scatter and all_gather by the ring, the check on and off, one segment to
// hundreds of them, blocks within and beyond the look-ahead's limit: exact on every rank.
void expect_exact_ring_collectives(Group& g, const std::string& what) {
  const int world = g.size();
  AllReduceOptions o;
  o.algorithm = Algorithm::kRing;
  o.segment_bytes = int64_t{16} << 10;
  for (const bool check : {true, false}) {
    g.set_wire_check(check);
    for (const int64_t count :
         {int64_t{0}, int64_t{1}, int64_t{world + 1}, int64_t{100003}, (int64_t{1} << 20) + 3}) {
      const at::Tensor sum = look_ahead_sum(world, count);
      for (const auto dtype : {at::kFloat, at::kDouble, at::kLong}) {
        at::Tensor x = look_ahead_values(g.rank(), count, dtype);
        all_reduce(g, x, o);
        EXPECT_TRUE(at::equal(x, sum.to(dtype)))
            << what << ": all_reduce of " << count << " " << dtype << " check " << check;
      }
      if (world == 4) {  // a power of two: the average is exact in float
        AllReduceOptions avg = o;
        avg.op = ReduceOp::kAvg;
        at::Tensor x = look_ahead_values(g.rank(), count, at::kFloat);
        all_reduce(g, x, avg);
        EXPECT_TRUE(at::equal(x, (sum / world).to(at::kFloat))) << what << ": avg " << count;
      }
      at::Tensor in = look_ahead_values(g.rank(), count, at::kFloat);
      at::Tensor block = at::zeros({block_count(count, world, g.rank())}, at::kFloat);
      reduce_scatter(g, in, block, ReduceOp::kSum);
      int64_t begin = 0;
      for (int r = 0; r < g.rank(); ++r)
        begin += block_count(count, world, r);
      EXPECT_TRUE(at::equal(block, sum.to(at::kFloat).narrow(0, begin, block.numel())))
          << what << ": reduce_scatter of " << count;
      at::Tensor gathered = at::zeros({count}, at::kFloat);
      all_gather(g, block, gathered);
      EXPECT_TRUE(at::equal(gathered, sum.to(at::kFloat))) << what << ": all_gather " << count;
    }
  }
  // Blocks beyond the limit: every rank posts with the step.
  const int64_t large = detail::kRingLookAheadMaxBytes / 4 * world + 4099;
  at::Tensor x = look_ahead_values(g.rank(), large, at::kFloat);
  all_reduce(g, x, o);
  EXPECT_TRUE(at::equal(x, look_ahead_sum(world, large).to(at::kFloat))) << what << ": large";
}

class RingLookAheadTest : public ::testing::TestWithParam<int> {};

// Every rank looking ahead, only some (each rank decides for its own receives), and with the
// first step in an opening.
TEST_P(RingLookAheadTest, CollectivesAreExactWhetherRanksLookAheadOrNot) {
  testing::run_ranks(
      GetParam(),
      [](Group& g) {
        for (const LookAheadLinks& links :
             {LookAheadLinks{"every link long", false, false},
              LookAheadLinks{"even ranks' links long", true, false},
              LookAheadLinks{"every link long, with openings", false, true}}) {
          const bool long_links = !links.only_even_ranks_long || g.rank() % 2 == 0;
          set_round_trips_to(g, long_links ? kLookAheadRoundTrip : 0.0001);
          if (links.openings) {
            for (int peer = 0; peer < g.size(); ++peer)
              if (peer != g.rank()) g.set_opening_capacity(peer, int64_t{64} << 10);
          }
          // The left neighbour's link decides; this rank told itself every link is the same.
          EXPECT_EQ(detail::ring_looks_ahead(g, detail::kRingLookAheadMaxBytes), long_links);
          EXPECT_FALSE(detail::ring_looks_ahead(g, detail::kRingLookAheadMaxBytes + 1));
          expect_exact_ring_collectives(g, std::string(links.name) + ", rank " +
                                               std::to_string(g.rank()) + " of " +
                                               std::to_string(g.size()));
          g.barrier();
        }
      },
      std::chrono::seconds(120), /*streams=*/2);
}

INSTANTIATE_TEST_SUITE_P(Worlds, RingLookAheadTest, ::testing::Values(3, 4));

// Where the ring does not look ahead: two ranks (a step's receive block is the one the step
// before sends), short or unmeasured links.
TEST(RingLookAheadRulesTest, OnlyLongLinksBetweenMoreThanTwoRanks) {
  testing::run_ranks(2, [](Group& g) {
    set_round_trips_to(g, kLookAheadRoundTrip);
    EXPECT_FALSE(detail::ring_looks_ahead(g, 1024));
    g.barrier();
  });
  testing::run_ranks(3, [](Group& g) {
    EXPECT_FALSE(detail::ring_looks_ahead(g, 1024));  // not measured: -1
    set_round_trips_to(g, kLongRttSeconds * 0.99);
    EXPECT_FALSE(detail::ring_looks_ahead(g, 1024));
    set_round_trips_to(g, kLongRttSeconds);
    EXPECT_TRUE(detail::ring_looks_ahead(g, 1024));
    g.barrier();
  });
}

}  // namespace
}  // namespace dtrain::comm
