// Openings (Group::isend_opening / irecv_opening): receives posted before their messages
// exist, and the ring's first step riding them; every result against values computed
// without them.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../support/ranks.h"
#include "dtrain/comm/allreduce.h"
#include "dtrain/comm/collectives.h"
#include "dtrain/comm/error.h"
#include "dtrain/comm/group.h"
#include "dtrain/comm/tags.h"

namespace dtrain::comm {
namespace {

const int kOpeningTagA = collective_tag(CollectiveChannel::kAllReduce);
const int kOpeningTagB = collective_tag(CollectiveChannel::kBroadcast);

at::Tensor opening_pattern(int64_t n, int seed) {
  return ((at::arange(n, at::kLong) * 7 + seed * 13) % 251).to(at::kByte);
}

void open_every_link(Group& g, int64_t capacity) {
  for (int peer = 0; peer < g.size(); ++peer)
    if (peer != g.rank()) g.set_opening_capacity(peer, capacity);
}

// Sizes from one byte to the capacity (one piece, several, one per connection), both
// directions, two tags interleaved, three rounds so the standing receives are taken and
// posted again; the check on and off.
TEST(OpeningsTest, CarryEverySizeExactlyOnTwoTagsBothWays) {
  constexpr int64_t kCapacity = int64_t{1} << 20;
  testing::run_ranks(
      2,
      [](Group& g) {
        open_every_link(g, kCapacity);
        const int peer = 1 - g.rank();
        int seed = 0;
        for (const bool check : {true, false}) {
          g.set_wire_check(check);
          for (int round = 0; round < 3; ++round) {
            for (const int64_t n : {int64_t{1}, int64_t{5}, int64_t{65536}, int64_t{65537},
                                    int64_t{200003}, kCapacity}) {
              ++seed;
              const at::Tensor mine_a = opening_pattern(n, seed * 2 + g.rank());
              const at::Tensor mine_b = opening_pattern(n / 2 + 1, seed * 3 + g.rank());
              at::Tensor got_a = at::zeros({n}, at::kByte);
              at::Tensor got_b = at::zeros({n / 2 + 1}, at::kByte);
              Request ra = g.irecv_opening(got_a, peer, kOpeningTagA);
              Request rb = g.irecv_opening(got_b, peer, kOpeningTagB);
              Request sb = g.isend_opening(mine_b, peer, kOpeningTagB);
              Request sa = g.isend_opening(mine_a, peer, kOpeningTagA);
              rb.wait();
              ra.wait();
              sa.wait();
              sb.wait();
              EXPECT_TRUE(at::equal(got_a, opening_pattern(n, seed * 2 + peer)))
                  << n << " " << check;
              EXPECT_TRUE(at::equal(got_b, opening_pattern(n / 2 + 1, seed * 3 + peer))) << n;
            }
          }
        }
        g.barrier();
      },
      std::chrono::seconds(60), /*streams=*/3);
}

TEST(OpeningsTest, RefuseWhatTheyCannotCarry) {
  testing::run_ranks(2, [](Group& g) {
    const int peer = 1 - g.rank();
    at::Tensor small = at::zeros({16}, at::kByte);
    EXPECT_THROW(g.isend_opening(small, peer, kOpeningTagA), std::invalid_argument);  // no openings
    g.set_opening_capacity(peer, 1024);
    at::Tensor big = at::zeros({1025}, at::kByte);
    EXPECT_THROW(g.isend_opening(big, peer, kOpeningTagA), std::invalid_argument);
    EXPECT_THROW(g.irecv_opening(big, peer, kOpeningTagA), std::invalid_argument);
    EXPECT_THROW(g.isend_opening(small, peer, 7), std::invalid_argument);  // not a collective's
    EXPECT_THROW(g.isend_opening(small, peer, kOpeningTagA | (1 << 15)), std::invalid_argument);
    EXPECT_THROW(g.set_opening_capacity(peer, -1), std::invalid_argument);
    at::Tensor got = at::zeros({16}, at::kByte);
    Request r = g.irecv_opening(got, peer, kOpeningTagA);
    g.isend_opening(opening_pattern(16, g.rank()), peer, kOpeningTagA).wait();
    EXPECT_THROW(g.irecv_opening(got, peer, kOpeningTagA), std::logic_error);  // one in flight
    r.wait();
    EXPECT_TRUE(at::equal(got, opening_pattern(16, peer)));
    // In use: off and on again, not another size.
    EXPECT_THROW(g.set_opening_capacity(peer, 2048), std::invalid_argument);
    g.set_opening_capacity(peer, 0);
    EXPECT_EQ(g.opening_capacity(peer), 0);
    g.set_opening_capacity(peer, 1024);
    EXPECT_EQ(g.opening_capacity(peer), 1024);
    g.barrier();
  });
}

// Ranks that disagree on an opening's size get an error naming it, not the bytes.
TEST(OpeningsTest, ADisagreementIsNamedNotUsed) {
  testing::run_ranks(2, [](Group& g) {
    const int peer = 1 - g.rank();
    g.set_opening_capacity(peer, 4096);
    if (g.rank() == 0) {
      g.isend_opening(opening_pattern(100, 1), peer, kOpeningTagA).wait();
    } else {
      at::Tensor got = at::zeros({200}, at::kByte);
      Request r = g.irecv_opening(got, peer, kOpeningTagA);
      try {
        r.wait();
        ADD_FAILURE() << "a 100-byte opening was taken as 200 bytes";
      } catch (const CorruptMessage& e) {
        EXPECT_NE(std::string(e.what()).find("disagree on their openings"), std::string::npos)
            << e.what();
      }
    }
  });
}

// A message longer than the opening goes as the opening's worth of whole values and the rest
// (two requests each way), one that fits as one, and without openings as one ordinary
// message; every byte exact, for a capacity that is not a whole number of values too.
TEST(OpeningsTest, ALongerMessageLeadsWithAnOpening) {
  testing::run_ranks(
      2,
      [](Group& g) {
        const int peer = 1 - g.rank();
        int seed = 0;
        for (const int64_t capacity : {int64_t{1001}, int64_t{0}}) {
          open_every_link(g, capacity);
          for (const auto dtype : {at::kFloat, at::kDouble, at::kByte}) {
            for (const int64_t n : {int64_t{1}, int64_t{125}, int64_t{1024}, int64_t{100003}}) {
              ++seed;
              const at::Tensor mine =
                  opening_pattern(n, seed * 2 + g.rank()).to(dtype).mul_(g.rank() + 1);
              at::Tensor got = at::zeros({n}, dtype);
              std::vector<Request> receives, sends;
              g.irecv_opening_first(got, peer, kOpeningTagA, receives);
              g.isend_opening_first(mine, peer, kOpeningTagA, sends);
              const int64_t bytes = n * static_cast<int64_t>(got.element_size());
              const size_t expected = capacity > 0 && bytes > capacity ? 2 : 1;
              EXPECT_EQ(receives.size(), expected) << capacity << " " << n;
              EXPECT_EQ(sends.size(), expected) << capacity << " " << n;
              for (auto& r : receives)
                r.wait();
              for (auto& r : sends)
                r.wait();
              const at::Tensor want = opening_pattern(n, seed * 2 + peer).to(dtype).mul_(peer + 1);
              EXPECT_TRUE(at::equal(got, want)) << capacity << " " << n << " " << dtype;
            }
          }
          open_every_link(g, 0);
          g.barrier();
        }
      },
      std::chrono::seconds(60), /*streams=*/2);
}

at::Tensor opening_values(int rank, int64_t count, at::ScalarType dtype) {
  return ((at::arange(count, at::kLong) * 5 + rank * 3) % 17 - 8).to(dtype);
}

at::Tensor opening_sum(int world, int64_t count, at::ScalarType dtype) {
  at::Tensor sum = at::zeros({count}, at::kDouble);
  for (int r = 0; r < world; ++r)
    sum += opening_values(r, count, at::kDouble);
  return sum.to(dtype);
}

class RingOpeningsTest : public ::testing::TestWithParam<int> {};

// The ring with its first segments in an opening: all-reduce, reduce_scatter (the first step
// a reduction) and all_gather (a gather), sizes from empty to many segments, the check on
// and off, exact against a float64 sum; and fewer messages than without openings, so the
// openings were used. The exchange all-reduce too, its messages openings where they fit.
TEST_P(RingOpeningsTest, AllReduceReduceScatterAllGatherAreExact) {
  const int world = GetParam();
  testing::run_ranks(
      world,
      [world](Group& g) {
        open_every_link(g, int64_t{256} << 10);
        AllReduceOptions o;
        o.algorithm = Algorithm::kRing;
        o.segment_bytes = int64_t{64} << 10;
        for (const bool check : {true, false}) {
          g.set_wire_check(check);
          for (const int64_t count : {int64_t{0}, int64_t{1}, int64_t{world + 1}, int64_t{100003},
                                      (int64_t{1} << 20) + 3}) {
            for (const auto algo : {Algorithm::kRing, Algorithm::kExchange}) {
              for (const auto dtype : {at::kFloat, at::kDouble, at::kLong}) {
                AllReduceOptions a = o;
                a.algorithm = algo;
                at::Tensor x = opening_values(g.rank(), count, dtype);
                all_reduce(g, x, a);
                EXPECT_TRUE(at::equal(x, opening_sum(world, count, dtype)))
                    << to_string(algo) << " " << count << " " << check << " rank " << g.rank();
              }
            }
            at::Tensor in = opening_values(g.rank(), count, at::kFloat);
            at::Tensor block = at::zeros({block_count(count, world, g.rank())}, at::kFloat);
            reduce_scatter(g, in, block, ReduceOp::kSum);
            const at::Tensor want = opening_sum(world, count, at::kFloat);
            const int64_t begin = [&] {
              int64_t b = 0;
              for (int r = 0; r < g.rank(); ++r)
                b += block_count(count, world, r);
              return b;
            }();
            EXPECT_TRUE(at::equal(block, want.narrow(0, begin, block.numel()))) << count;
            at::Tensor gathered = at::zeros({count}, at::kFloat);
            all_gather(g, block, gathered);
            EXPECT_TRUE(at::equal(gathered, want)) << count;
          }
        }
        // The same all-reduce with and without openings: the opening carries 4 segments of
        // 64 KiB in one message, so the receives counted are fewer by 3 with them.
        at::Tensor x = at::ones({int64_t{1} << 20}, at::kFloat);
        const int pred = (g.rank() + world - 1) % world;
        const auto received = [&] {
          g.barrier();
          g.reset_link_stats();
          all_reduce(g, x, o);
          return g.link_stats(pred).recv.messages;
        };
        const int64_t with_openings = received();
        open_every_link(g, 0);
        const int64_t without = received();
        EXPECT_EQ(without - with_openings, 3) << without << " " << with_openings;
        g.barrier();
      },
      std::chrono::seconds(120), /*streams=*/2);
}

// The binomial broadcast with its messages as openings where they fit (up to the capacity,
// here exactly 256 KiB) and ordinary ones beyond: every root, exact.
TEST_P(RingOpeningsTest, TreeBroadcastIsExactFromEveryRoot) {
  const int world = GetParam();
  testing::run_ranks(
      world,
      [world](Group& g) {
        open_every_link(g, int64_t{256} << 10);
        for (int root = 0; root < world; ++root) {
          for (const int64_t count : {int64_t{1}, int64_t{1000}, int64_t{65536}, int64_t{65537}}) {
            at::Tensor x = g.rank() == root ? opening_values(root, count, at::kFloat)
                                            : at::full({count}, -99.0f);
            broadcast(g, x, root, BroadcastAlgorithm::kBinomialTree);
            EXPECT_TRUE(at::equal(x, opening_values(root, count, at::kFloat)))
                << "root " << root << " count " << count << " rank " << g.rank();
          }
        }
        g.barrier();
      },
      std::chrono::seconds(60), /*streams=*/2);
}

INSTANTIATE_TEST_SUITE_P(Worlds, RingOpeningsTest, ::testing::Values(2, 3));

}  // namespace
}  // namespace dtrain::comm
