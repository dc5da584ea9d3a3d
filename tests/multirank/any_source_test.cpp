// Group::irecv_from_any: receives matched by tag alone take each sender's message whole and
// say who sent it, for the inline framing, messages in pieces and striped messages, on 3
// ranks as threads over real Gloo.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "../support/ranks.h"
#include "dtrain/comm/group.h"

namespace dtrain::comm {
namespace {

at::Tensor message_of(int rank, int64_t count) {
  return at::arange(count, at::kFloat) + rank * 1000;
}

// Ranks 1 and 2 send two messages of `count` floats each to rank 0, which receives all four
// from any rank and checks each against its announced sender.
void senders_reach_any_receive(Group& g, int64_t count) {
  constexpr int kTag = 7;
  if (g.rank() == 0) {
    std::vector<int> sources;
    for (int i = 0; i < 4; ++i) {
      at::Tensor got = at::full({count}, -1.0f);
      Request r = g.irecv_from_any(got, kTag);
      EXPECT_EQ(r.source(), -1);
      r.wait();
      ASSERT_TRUE(r.source() == 1 || r.source() == 2) << r.source();
      EXPECT_TRUE(at::equal(got, message_of(r.source(), count))) << "from " << r.source();
      sources.push_back(r.source());
    }
    std::sort(sources.begin(), sources.end());
    EXPECT_EQ(sources, (std::vector<int>{1, 1, 2, 2}));
  } else {
    const at::Tensor mine = message_of(g.rank(), count);
    g.send(mine, 0, kTag);
    g.send(mine, 0, kTag);
  }
}

TEST(AnySourceTest, SmallMessagesComeWholeWithTheirSender) {
  testing::run_ranks(3, [](Group& g) { senders_reach_any_receive(g, 10); });
}

TEST(AnySourceTest, MessagesInPiecesComeWholeWithTheirSender) {
  // 3 MiB: pieces of 1 MiB, then the check message.
  testing::run_ranks(3, [](Group& g) { senders_reach_any_receive(g, 3 << 18); });
}

TEST(AnySourceTest, StripedMessagesComeWholeWithTheirSender) {
  testing::run_ranks(
      3,
      [](Group& g) {
        for (int peer = 0; peer < 3; ++peer)
          if (peer != g.rank()) g.set_streams(peer, 3);
        senders_reach_any_receive(g, 1 << 18);
      },
      std::chrono::seconds(60), 3);
}

TEST(AnySourceTest, RefusesWhatCannotTellItsSender) {
  testing::run_ranks(2, [](Group& g) {
    at::Tensor empty = at::empty({0});
    EXPECT_THROW(g.irecv_from_any(empty, 1), std::invalid_argument);
    at::Tensor strided = at::zeros({4, 4}).t();
    EXPECT_THROW(g.irecv_from_any(strided, 1), std::invalid_argument);
  });
}

TEST(AnySourceTest, StripedReceivesNeedTheSameStreamsToEveryPeer) {
  testing::run_ranks(
      3,
      [](Group& g) {
        if (g.rank() == 2) return;
        g.set_streams(1 - g.rank(), 1);  // the link 0-1 on one connection, 0-2 on two
        if (g.rank() == 1) {
          g.send(at::full({4}, 1.0f), 0, 2);
          return;
        }
        at::Tensor big = at::zeros({1 << 18});
        EXPECT_THROW(g.irecv_from_any(big, 1), std::invalid_argument);
        at::Tensor small = at::zeros({4});  // not striped: any peer will do
        Request r = g.irecv_from_any(small, 2);
        r.wait();
        EXPECT_EQ(r.source(), 1);
        EXPECT_TRUE(at::equal(small, at::full({4}, 1.0f)));
      },
      std::chrono::seconds(60), 2);
}

}  // namespace
}  // namespace dtrain::comm
