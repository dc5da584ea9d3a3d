// A failure's message where a peer is gone, over real Gloo/TCP between rank threads: a
// subgroup's message says which world ranks it holds, and its failure is published under the
// world rank, so that a rank of another group reading a peer's failure reads that peer's.
// A group's first failure is its last: what it still has pending ends at once.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>

#include "../support/ranks.h"
#include "dtrain/comm/error.h"
#include "dtrain/comm/group.h"
#include "dtrain/comm/world.h"

namespace dtrain::comm {
namespace {

using namespace std::chrono_literals;

void wait_for(const std::atomic<bool>& flag) {
  while (!flag)
    std::this_thread::sleep_for(10ms);
}

// World ranks 1 and 3 form subgroup 'pair' (subgroup ranks 0 and 1). Rank 3 leaves it:
// rank 1's receive fails, and its message names the subgroup and its world ranks. Then
// world rank 0 leaves, and rank 2's receive from it fails: rank 0 published nothing, so the
// message must say rank 0 went silent. (Published under its subgroup rank, 0, rank 1's own
// failure read as rank 0's.)
TEST(PeerFailuresTest, ASubgroupsFailureIsPublishedUnderItsWorldRank) {
  std::atomic<bool> sub_failed{false}, zero_left{false};
  std::string sub_error, world_error;
  testing::run_ranks(
      4,
      [&](Group& g) {
        at::Tensor t = at::zeros({4});
        if (g.rank() == 1 || g.rank() == 3) {
          auto pair = connect_subgroup(g, {1, 3}, "pair");
          if (g.rank() == 3) return;  // leaves: its connections close
          try {
            pair->recv(t, 1, 7);
          } catch (const CommError& e) {
            sub_error = e.what();
          }
          sub_failed = true;
        } else if (g.rank() == 0) {
          wait_for(sub_failed);
          zero_left = true;  // leaves: its connections close
        } else {
          wait_for(zero_left);
          try {
            g.recv(t, 0, 7);
          } catch (const CommError& e) {
            world_error = e.what();
          }
        }
      },
      20s);
  EXPECT_NE(sub_error.find("rank 0/2 of subgroup 'pair' (world ranks 1, 3): recv from rank 1"),
            std::string::npos)
      << sub_error;
  EXPECT_NE(world_error.find("rank 2/4: recv from rank 0"), std::string::npos) << world_error;
  EXPECT_NE(world_error.find("rank 0 exited, crashed or stopped responding"), std::string::npos)
      << world_error;
  EXPECT_EQ(world_error.find("had already failed"), std::string::npos) << world_error;
}

// Rank 0 has a send to rank 1 pending (rank 1 is alive and never receives, as a stopped rank
// or one failing too would not) when its receive from rank 2 fails. Unwinding, a collective
// waits for its sends: that wait must end at once with the first failure, not after the
// group's timeout with Gloo's, which held a failed rank (and the cascade's store it serves).
TEST(PeerFailuresTest, AFailedGroupsPendingSendEndsAtOnceWithTheFirstFailure) {
  std::atomic<bool> zero_done{false};
  std::string recv_error, send_error, post_error;
  double send_wait_s = 0;
  testing::run_ranks(
      3,
      [&](Group& g) {
        if (g.rank() == 2) return;  // leaves: its connections close
        if (g.rank() == 1) {
          wait_for(zero_done);
          return;
        }
        at::Tensor out = at::ones({1 << 20});
        at::Tensor in = at::zeros({4});
        Request send = g.isend(out, 1, 7);
        try {  // the receive's post fails where rank 2's connection closed before it
          g.irecv(in, 2, 7).wait();
        } catch (const CommError& e) {
          recv_error = e.what();
        }
        const auto start = std::chrono::steady_clock::now();
        try {
          send.wait();
        } catch (const CommError& e) {
          send_error = e.what();
        }
        send_wait_s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        try {
          g.isend(out, 1, 8);
        } catch (const CommError& e) {
          post_error = e.what();
        }
        zero_done = true;
      },
      20s);
  EXPECT_NE(recv_error.find("rank 0/3: recv from rank 2"), std::string::npos) << recv_error;
  EXPECT_NE(send_error.find("rank 0/3: send to rank 1"), std::string::npos) << send_error;
  EXPECT_NE(send_error.find("the group failed before: rank 0/3: recv from rank 2"),
            std::string::npos)
      << send_error;
  EXPECT_LT(send_wait_s, 10.0) << "the send waited for the group's timeout (20 s)";
  EXPECT_NE(post_error.find("the group failed before"), std::string::npos) << post_error;
}

}  // namespace
}  // namespace dtrain::comm
