// Broadcast, reduce_scatter, all_gather and point-to-point accounting, against values
// computed independently of the algorithms.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstring>
#include <optional>

#include "../support/ranks.h"
#include "dtrain/base/crc32c.h"
#include "dtrain/comm/allreduce.h"
#include "dtrain/comm/collectives.h"
#include "dtrain/comm/error.h"
#include "dtrain/comm/group.h"

namespace dtrain::comm {
namespace {

at::Tensor rank_values(int rank, int64_t count, at::ScalarType dtype) {
  return ((at::arange(count, at::kLong) * 5 + rank * 3) % 17 - 8).to(dtype);
}

class CollectivesTest : public ::testing::TestWithParam<int> {};

TEST_P(CollectivesTest, BroadcastFromEveryRootBothAlgorithms) {
  const int world = GetParam();
  testing::run_ranks(world, [&](Group& g) {
    for (auto algo : {BroadcastAlgorithm::kBinomialTree, BroadcastAlgorithm::kScatterAllGather,
                      BroadcastAlgorithm::kAuto}) {
      for (int root = 0; root < world; ++root) {
        for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{world + 1}, int64_t{100003}}) {
          for (auto dtype : {at::kFloat, at::kBFloat16, at::kLong}) {
            at::Tensor x =
                g.rank() == root ? rank_values(root, count, dtype) : at::full({count}, -99, dtype);
            broadcast(g, x, root, algo);
            EXPECT_TRUE(at::equal(x, rank_values(root, count, dtype)))
                << "root " << root << " count " << count << " rank " << g.rank();
          }
        }
      }
    }
  });
}

TEST_P(CollectivesTest, ReduceScatterAndAllGatherMatchTheDefinition) {
  const int world = GetParam();
  testing::run_ranks(world, [&](Group& g) {
    for (int64_t count :
         {int64_t{0}, int64_t{1}, int64_t{world - 1}, int64_t{7}, int64_t{1 << 17}}) {
      for (auto dtype : {at::kFloat, at::kDouble, at::kInt}) {
        // Expected reduction, computed directly in int64.
        at::Tensor sum = at::zeros({count}, at::kLong);
        for (int r = 0; r < world; ++r)
          sum += rank_values(r, count, at::kLong);
        int64_t begin = 0;
        for (int j = 0; j < g.rank(); ++j)
          begin += block_count(count, world, j);
        const int64_t mine = block_count(count, world, g.rank());

        at::Tensor input = rank_values(g.rank(), count, dtype);
        at::Tensor out = at::empty({mine}, dtype);
        reduce_scatter(g, input, out, ReduceOp::kSum);
        EXPECT_TRUE(at::equal(out, sum.narrow(0, begin, mine).to(dtype))) << "count " << count;

        at::Tensor gathered = at::empty({count}, dtype);
        all_gather(g, out, gathered);
        EXPECT_TRUE(at::equal(gathered, sum.to(dtype))) << "count " << count;
      }
    }
    at::Tensor wrong_size = at::empty({3}, at::kFloat);
    at::Tensor input = at::zeros({world * 10}, at::kFloat);
    EXPECT_THROW(reduce_scatter(g, input, wrong_size, ReduceOp::kSum), std::invalid_argument);
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, CollectivesTest, ::testing::Values(1, 2, 3, 4, 5, 8),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

// The wire check's two framings round-trip exactly, with it on and off: small payloads
// carry the check appended (up to 1 MiB), large ones go in pieces (1 .. 4 MiB) and a check
// message.
TEST(GroupTest, CheckedMessagesOfEverySizeArriveExactly) {
  testing::run_ranks(2, [](Group& g) {
    for (const bool check : {true, false}) {
      g.set_wire_check(check);
      const double check_s_before = g.wire_check_seconds();
      for (const int64_t n : {int64_t{1}, int64_t{65536}, int64_t{1} << 20, (int64_t{1} << 20) + 1,
                              int64_t{9 << 20} + 3}) {
        const at::Tensor want = at::arange(n, at::kInt).to(at::kByte);
        if (g.rank() == 0) {
          g.send(want, 1, 5);
        } else {
          at::Tensor got = at::zeros({n}, at::kByte);
          g.recv(got, 0, 5);
          EXPECT_TRUE(at::equal(got, want)) << n << (check ? " checked" : "");
        }
      }
      // The check's time is counted on both ends, and only while it is on.
      if (check)
        EXPECT_GT(g.wire_check_seconds(), check_s_before);
      else
        EXPECT_EQ(g.wire_check_seconds(), check_s_before);
      g.barrier();
    }
  });
}

// A striped link (several connections per peer): every framing (inline, pieces, caller-
// checked with and without the caller's CRC, byte messages) of every size arrives exactly,
// the check on or off, and the ring all-reduce on it is exact; a size under kStripeMinBytes
// takes one connection.
TEST(GroupTest, StripedLinksCarryEveryFramingExactly) {
  testing::run_ranks(
      3,
      [](Group& g) {
        EXPECT_EQ(g.stream_capacity(), 3);
        for (int peer = 0; peer < 3; ++peer) {
          if (peer == g.rank()) continue;
          EXPECT_EQ(g.streams(peer), 3);
          EXPECT_GE(g.round_trip(peer), 0);
        }
        for (const bool check : {true, false}) {
          g.set_wire_check(check);
          for (const int64_t n : {int64_t{5}, Group::kStripeMinBytes - 1, Group::kStripeMinBytes,
                                  (int64_t{3} << 20) + 7}) {
            const at::Tensor want = at::arange(n, at::kInt).to(at::kByte);
            if (g.rank() == 0) {
              g.send(want, 1, 5);
              g.isend_checked(want, 1, 6, crc32c(want.data_ptr(), static_cast<size_t>(n))).wait();
              g.isend_checked(want, 1, 9, std::nullopt).wait();  // the group computes the CRC
              g.isend_bytes(
                   std::vector<uint8_t>(want.data_ptr<uint8_t>(), want.data_ptr<uint8_t>() + n), 1,
                   7)
                  .wait();
            } else if (g.rank() == 1) {
              at::Tensor got = at::zeros({n}, at::kByte);
              g.recv(got, 0, 5);
              EXPECT_TRUE(at::equal(got, want)) << n;
              at::Tensor deferred = at::zeros({n}, at::kByte);
              Request r = g.irecv_deferred(deferred, 0, 6);
              r.wait();
              EXPECT_NO_THROW(
                  g.verify_deferred(r, crc32c(deferred.data_ptr(), static_cast<size_t>(n))));
              EXPECT_TRUE(at::equal(deferred, want)) << n;
              // Without a CRC from the caller the check after the payload carries the
              // payload's own; with the check off nothing is sent beside the payload.
              at::Tensor late = at::zeros({n}, at::kByte);
              Request l = g.irecv_deferred(late, 0, 9);
              l.wait();
              EXPECT_TRUE(at::equal(late, want)) << n;
              const uint32_t want_crc = crc32c(want.data_ptr(), static_cast<size_t>(n));
              EXPECT_EQ(l.sender_check().crc, check ? want_crc : 0u) << n;
              EXPECT_EQ(l.sender_check().bytes, check ? static_cast<uint32_t>(n) : 0u) << n;
              EXPECT_NO_THROW(g.verify_deferred(l, want_crc));
              const auto bytes = g.recv_bytes(0, 7);
              EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), want.data_ptr<uint8_t>())) << n;
            }
          }
          at::Tensor x = at::full({(int64_t{3} << 20) + 11}, g.rank() + 1.0f);
          AllReduceOptions o;
          o.algorithm = Algorithm::kRing;
          all_reduce(g, x, o);
          EXPECT_TRUE(at::equal(x, at::full_like(x, 6.0f)));
          g.barrier();
        }
      },
      std::chrono::seconds(60), /*streams=*/3);
}

// A caller-checked message whose CRC does not match what arrived (the sender's claim is
// wrong here, as a flipped bit on the wire would make it) is refused by verify_deferred,
// naming the link; with the wire check off there is no check to fail.
TEST(GroupTest, DeferredVerificationRefusesAMismatch) {
  testing::run_ranks(2, [](Group& g) {
    const at::Tensor want = at::arange(1000, at::kFloat);
    const uint32_t crc = crc32c(want.data_ptr(), static_cast<size_t>(want.nbytes()));
    if (g.rank() == 0) {
      g.isend_checked(want, 1, 8, crc ^ 1).wait();
    } else {
      at::Tensor got = at::zeros({1000}, at::kFloat);
      Request r = g.irecv_deferred(got, 0, 8);
      r.wait();
      try {
        g.verify_deferred(r, crc32c(got.data_ptr(), static_cast<size_t>(got.nbytes())));
        ADD_FAILURE() << "a wrong CRC was accepted";
      } catch (const CorruptMessage& e) {
        EXPECT_NE(std::string(e.what()).find("arrived corrupted on the link rank 0 -> rank 1"),
                  std::string::npos)
            << e.what();
      }
    }
  });
}

// Ranks that disagree on a message's size (a rank of another configuration or version): the
// receiver of a shorter message than it expected finds no check of its own size and says so,
// instead of blaming the wire. (A longer one than the receiver posted ends it inside Gloo,
// which enforces the size on its own thread: docs/limitations.md.)
TEST(GroupTest, AMessageOfAnotherSizeIsNamedAsSuchNotAsCorruption) {
  testing::run_ranks(2, [](Group& g) {
    if (g.rank() == 0) {
      g.send(at::arange(990, at::kFloat), 1, 9);
    } else {
      at::Tensor got = at::zeros({1000}, at::kFloat);
      try {
        g.recv(got, 0, 9);
        ADD_FAILURE() << "a message of another size was taken";
      } catch (const CommError& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("did not arrive as this rank expected it on the link rank 0 -> rank 1"),
                  std::string::npos)
            << what;
        EXPECT_NE(what.find("disagree on the message's size"), std::string::npos) << what;
      }
    }
  });
}

// With room after the tensor (Group::Room::kCheck) a checked message up to 1 MiB carries its
// check there, in the caller's own buffers: the receiver finds [CRC32C, size] in its room,
// the payload arrives exactly, and with the check off (or in pieces) the room is untouched.
TEST(GroupTest, RoomAfterATensorCarriesTheCheckWithoutACopy) {
  testing::run_ranks(2, [](Group& g) {
    using Room = Group::Room;
    for (const bool check : {true, false}) {
      g.set_wire_check(check);
      for (const int64_t n :
           {int64_t{1}, int64_t{65536}, int64_t{1} << 20, (int64_t{1} << 20) + 1}) {
        const at::Tensor want = at::arange(n, at::kInt).to(at::kByte);
        at::Tensor buffer = at::full({n + Group::kCheckRoom}, 0xAA, at::kByte);
        at::Tensor view = buffer.narrow(0, 0, n);
        if (g.rank() == 0) {
          view.copy_(want);
          g.isend(view, 1, 6, Room::kCheck).wait();
          EXPECT_TRUE(at::equal(view, want)) << n;  // the payload itself is not changed
          continue;
        }
        g.irecv(view, 0, 6, Room::kCheck).wait();
        EXPECT_TRUE(at::equal(view, want)) << n << (check ? " checked" : "");
        const at::Tensor room = buffer.narrow(0, n, Group::kCheckRoom);
        if (check && n <= (int64_t{1} << 20)) {
          uint32_t words[2];
          std::memcpy(words, room.data_ptr(), sizeof(words));
          EXPECT_EQ(words[0], crc32c(want.data_ptr(), static_cast<size_t>(n))) << n;
          EXPECT_EQ(words[1], static_cast<uint32_t>(n));
        } else {
          EXPECT_TRUE(at::equal(room, at::full({Group::kCheckRoom}, 0xAA, at::kByte))) << n;
        }
      }
      g.barrier();
    }
  });
}

TEST(GroupTest, TaggedMessagesMatchPerTagAndAreCounted) {
  testing::run_ranks(2, [](Group& g) {
    if (g.rank() == 0) {
      auto a = at::full({1000}, 1.0f);
      auto b = at::full({10}, 2.0f);
      // Posted in the opposite order to the receiver's: tags keep them apart.
      Request rb = g.isend(b, 1, 7);
      Request ra = g.isend(a, 1, 3);
      ra.wait();
      rb.wait();
      const std::vector<uint8_t> bytes{1, 2, 3, 250};
      g.isend_bytes(bytes, 1, 9).wait();
      g.isend_bytes({}, 1, 9).wait();
      const LinkStats s = g.link_stats(1);
      // Byte messages: a 16-byte [length, CRC32C] and the payload; the wire check's
      // own check messages are not payload.
      EXPECT_EQ(s.send.bytes, 4000 + 40 + 16 + 4 + 16);
      EXPECT_EQ(s.recv.bytes, 0);
    } else {
      auto a = at::empty({1000});
      auto b = at::empty({10});
      g.recv(a, 0, 3);
      g.recv(b, 0, 7);
      EXPECT_TRUE(at::equal(a, at::full({1000}, 1.0f)));
      EXPECT_TRUE(at::equal(b, at::full({10}, 2.0f)));
      EXPECT_EQ(g.recv_bytes(0, 9), (std::vector<uint8_t>{1, 2, 3, 250}));
      EXPECT_TRUE(g.recv_bytes(0, 9).empty());
      const LinkStats s = g.link_stats(0);
      EXPECT_EQ(s.recv.bytes, 4000 + 40 + 16 + 4 + 16);
      EXPECT_EQ(s.recv.messages, 5);  // the empty payload is not a message
      EXPECT_GT(s.recv.active_s, 0.0);
      EXPECT_GE(s.recv.active_s, 0.0);
    }
    g.barrier();
  });
}

// Every rank sends each other rank a message of its own length (one of them empty) and gets
// back exactly what each sent it, in the order of `peers`, as isend_bytes/recv_bytes would.
TEST(GroupTest, ExchangeBytesDeliversEveryPeersMessage) {
  testing::run_ranks(3, [](Group& g) {
    auto message = [](int from, int to) {
      std::vector<uint8_t> m(static_cast<size_t>(from == 2 && to == 0 ? 0 : 1000 * from + 7 * to));
      for (size_t i = 0; i < m.size(); ++i)
        m[i] = static_cast<uint8_t>(31 * from + 17 * to + i);
      return m;
    };
    std::vector<int> peers;
    std::vector<std::vector<uint8_t>> out;
    for (int j = 2; j >= 0; --j) {  // not in rank order: the result follows `peers`
      if (j == g.rank()) continue;
      peers.push_back(j);
      out.push_back(message(g.rank(), j));
    }
    std::vector<const std::vector<uint8_t>*> out_ptrs;
    for (const auto& m : out)
      out_ptrs.push_back(&m);
    const auto in = g.exchange_bytes(peers, out_ptrs, 11);
    ASSERT_EQ(in.size(), peers.size());
    for (size_t i = 0; i < peers.size(); ++i)
      EXPECT_EQ(in[i], message(peers[i], g.rank())) << "from rank " << peers[i];
    EXPECT_THROW(g.exchange_bytes(peers, {}, 12), std::invalid_argument);
  });
}

TEST(GroupTest, InvalidPeersAndNonContiguousTensorsAreRejected) {
  testing::run_ranks(2, [](Group& g) {
    auto t = at::zeros({4, 4});
    EXPECT_THROW(g.isend(t, g.rank(), 0), std::invalid_argument);
    EXPECT_THROW(g.isend(t, 5, 0), std::invalid_argument);
    EXPECT_THROW(g.isend(t.t(), 1 - g.rank(), 0), std::invalid_argument);
  });
}

TEST(GroupTest, SilentPeerTimesOutWithAnErrorNamingIt) {
  // Rank 0 stays connected but never sends: rank 1's recv must time out (5 s), not hang.
  testing::run_ranks(
      2,
      [](Group& g) {
        if (g.rank() == 0) {
          std::this_thread::sleep_for(std::chrono::seconds(8));
          return;
        }
        auto t = at::empty({4});
        try {
          g.recv(t, 0, 5);
          ADD_FAILURE() << "recv returned";
        } catch (const CommError& e) {
          const std::string what = e.what();
          EXPECT_NE(what.find("recv from rank 0"), std::string::npos) << what;
          EXPECT_NE(what.find("Timed out"), std::string::npos) << what;
        }
      },
      std::chrono::seconds(5));
}

TEST(GroupTest, DepartedPeerFailsTheRecvAndNamesIt) {
  testing::run_ranks(2, [](Group& g) {
    if (g.rank() == 0) return;  // leaves: its connections close
    auto t = at::empty({4});
    try {
      g.recv(t, 0, 5);
      ADD_FAILURE() << "recv returned";
    } catch (const CommError& e) {
      EXPECT_NE(std::string(e.what()).find("recv from rank 0"), std::string::npos) << e.what();
    }
  });
}

}  // namespace
}  // namespace dtrain::comm
