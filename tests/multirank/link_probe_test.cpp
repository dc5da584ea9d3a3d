// The link probe's pings (comm/link_probe.h) on loopback: both ends keep the same round trip,
// a ping count decided by the initiator alone leaves no receive posted behind it (the next
// message on the tag reaches its own receive), and every pair of ranks measures its link.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "../support/ranks.h"
#include "dtrain/comm/group.h"
#include "dtrain/comm/link_probe.h"
#include "dtrain/comm/tags.h"

namespace dtrain::comm {
namespace {

TEST(LinkProbeTest, BothEndsKeepTheSameRoundTripAndTheTagIsCleanAfterIt) {
  dtrain::testing::run_ranks(2, [&](Group& g) {
    const int tag = connect_probe_tag();
    const int peer = 1 - g.rank();
    for (int round = 0; round < 3; ++round) {
      const double rtt = probe_round_trip(g, peer, g.rank() == 0, tag);
      EXPECT_GT(rtt, 0);
      EXPECT_LT(rtt, 0.5);
      at::Tensor theirs = at::full({1}, rtt, at::kDouble);
      at::Tensor mine = theirs.clone();
      // The same tag right after: a ping receive left posted would take this message.
      if (g.rank() == 0) {
        g.send(at::full({8}, 40 + round, at::kByte), peer, tag);
        g.recv(theirs, peer, tag);
      } else {
        at::Tensor got = at::zeros({8}, at::kByte);
        g.recv(got, peer, tag);
        EXPECT_TRUE(at::equal(got, at::full({8}, 40 + round, at::kByte))) << got;
        g.send(mine, peer, tag);
      }
      EXPECT_EQ(theirs.item<double>(), rtt) << "rank " << g.rank();
    }
  });
}

TEST(LinkProbeTest, EveryPairMeasuresItsRoundTripAndBothEndsAgree) {
  for (const int world : {3, 4}) {
    SCOPED_TRACE(world);
    dtrain::testing::run_ranks(world, [&](Group& g) {
      measure_round_trips(g);
      at::Tensor table = at::zeros({world, world}, at::kDouble);
      for (int peer = 0; peer < world; ++peer) {
        if (peer == g.rank()) continue;
        EXPECT_GT(g.round_trip(peer), 0) << g.rank() << " -> " << peer;
        table[g.rank()][peer] = g.round_trip(peer);
      }
      g.native_all_reduce(table, ReduceOp::kSum);
      EXPECT_TRUE(at::equal(table, table.t())) << table;
    });
  }
}

}  // namespace
}  // namespace dtrain::comm
