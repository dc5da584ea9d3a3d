// ReadinessVote (parallel/readiness_vote.h): every rank counts the same tally (the reading in
// everywhere only when each rank had it, the slowest rank's step), votes in turn over one tag
// with the next posted while nothing waits on it, and a malformed answer is an error naming
// the field, never a choice.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "../support/ranks.h"
#include "dtrain/comm/group.h"
#include "dtrain/comm/tags.h"
#include "dtrain/parallel/readiness_vote.h"

namespace dtrain::parallel {
namespace {

int vote_tag() {
  static const comm::TagLayout layout(comm::TagSpace::kOuter, {{"phase", 3}});
  return layout.make({4});
}

class ReadinessVoteTest : public ::testing::TestWithParam<int> {};

// Round v: rank r has the reading from round r on, and reports a step of (r + 1) (v + 1) ms.
TEST_P(ReadinessVoteTest, EveryRankCountsTheSameTallyRoundAfterRound) {
  const int world = GetParam();
  dtrain::testing::run_ranks(world, [&](comm::Group& g) {
    ReadinessVote vote(g, vote_tag());
    for (int v = 0; v < world + 1; ++v) {
      vote.post(g.rank() <= v, (g.rank() + 1) * (v + 1) * 1e-3);
      EXPECT_TRUE(vote.out());
      const ReadinessVote::Tally tally = vote.count();
      EXPECT_FALSE(vote.out());
      EXPECT_EQ(tally.everywhere, v >= world - 1) << "rank " << g.rank() << ", round " << v;
      EXPECT_DOUBLE_EQ(tally.slowest_step_s, world * (v + 1) * 1e-3) << "rank " << g.rank();
    }
  });
}

// As Diloco uses it: a vote left out while the rank does other work, counted later; one left
// out at the end is waited for by the destructor.
TEST_P(ReadinessVoteTest, AVoteLeftOutIsCountedLaterAndOneLeftAtTheEndEndsCleanly) {
  const int world = GetParam();
  dtrain::testing::run_ranks(world, [&](comm::Group& g) {
    ReadinessVote vote(g, vote_tag());
    vote.post(true, 0.02);
    at::Tensor other = at::full({1000}, g.rank(), at::kFloat);
    g.native_all_reduce(other, comm::ReduceOp::kSum);  // the group's other traffic meanwhile
    EXPECT_EQ(other[0].item<float>(), world * (world - 1) / 2);
    EXPECT_TRUE(vote.count().everywhere);
    vote.post(false, 0.01);
  });
}

TEST(ReadinessVoteErrorsTest, MisuseAndMalformedAnswersAreErrors) {
  dtrain::testing::run_ranks(2, [&](comm::Group& g) {
    ReadinessVote vote(g, vote_tag());
    EXPECT_THROW(vote.count(), std::logic_error);
    EXPECT_THROW(vote.post(true, -1), std::invalid_argument);
    EXPECT_THROW(vote.post(true, std::numeric_limits<double>::quiet_NaN()), std::invalid_argument);
    if (g.rank() == 0) {
      vote.post(true, 0.01);
      EXPECT_THROW(vote.post(true, 0.01), std::logic_error);
      try {
        vote.count();
        ADD_FAILURE() << "a reading flag of 2 was counted";
      } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("reading in"), std::string::npos) << e.what();
      }
    } else {  // a peer whose vote says 2 where a flag is 0 or 1
      at::Tensor in = at::empty({2}, at::kDouble);
      comm::Request r = g.irecv(in, 0, vote_tag());
      g.send(at::tensor({2.0, 0.01}, at::kDouble), 0, vote_tag());
      r.wait();
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Worlds, ReadinessVoteTest, ::testing::Values(2, 3, 4));

}  // namespace
}  // namespace dtrain::parallel
