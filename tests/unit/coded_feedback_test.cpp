// Error feedback's residuals carried from one group into another (parallel/coded_feedback.h:
// carry_residuals), against what each rank owes written out by hand: its contribution's
// scatter residuals by coordinate, an owner's gather residual times the new group's size,
// and in the new group its own block's share as the mean's.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <stdexcept>

#include "dtrain/parallel/coded_feedback.h"

namespace dtrain::parallel {
namespace {

at::Tensor values(std::initializer_list<float> v) {
  return at::tensor(std::vector<float>(v));
}

// 10 values among 3 ranks: blocks [0, 3), [3, 6), [6, 10) (comm/layout.h).
FeedbackResiduals rank_one_of_three() {
  FeedbackResiduals r;
  r.reset(3);
  r.scatter[0].restore(values({1, 2, 3}));
  r.scatter[2].restore(values({7, 8, 9, 10}));
  r.gather.restore(values({0.5, 0.25, -1}));  // the mean's, on its own block [3, 6)
  return r;
}

TEST(CodedFeedbackTest, ThreeRanksToTwoOweTheWholeVectorThroughTheContribution) {
  FeedbackResiduals r = rank_one_of_three();
  carry_residuals(r, 10, 3, 1, 2, 0);
  ASSERT_EQ(r.scatter.size(), 2u);
  EXPECT_FALSE(r.scatter[0].residual().defined());
  EXPECT_FALSE(r.scatter[1].residual().defined());
  EXPECT_TRUE(at::equal(r.gather.residual(), values({1, 2, 3, 1, 0.5, -2, 7, 8, 9, 10})));
}

TEST(CodedFeedbackTest, TwoRanksToFourSplitTheOwedVectorByTheNewBlocks) {
  FeedbackResiduals r;
  r.reset(2);
  r.gather.restore(values({1, 2, 3, 4, 5, 6, 7, 8}));
  carry_residuals(r, 8, 2, 1, 4, 2);  // blocks of 2; rank 2 owns [4, 6)
  ASSERT_EQ(r.scatter.size(), 4u);
  EXPECT_TRUE(at::equal(r.scatter[0].residual(), values({1, 2})));
  EXPECT_TRUE(at::equal(r.scatter[1].residual(), values({3, 4})));
  EXPECT_FALSE(r.scatter[2].residual().defined());
  EXPECT_TRUE(at::equal(r.scatter[3].residual(), values({7, 8})));
  EXPECT_TRUE(at::equal(r.gather.residual(), values({1.25, 1.5})));  // {5, 6} / 4
}

// The same size and another rank (one member left as another entered): the residuals follow
// their coordinates, where keeping them by rank put an owner's on another block.
TEST(CodedFeedbackTest, AnotherRankInAGroupOfTheSameSizeMovesEveryResidualToItsCoordinates) {
  FeedbackResiduals r = rank_one_of_three();
  carry_residuals(r, 10, 3, 1, 3, 2);
  EXPECT_TRUE(at::equal(r.scatter[0].residual(), values({1, 2, 3})));
  EXPECT_TRUE(at::equal(r.scatter[1].residual(), values({1.5, 0.75, -3})));  // 3 x the mean's
  EXPECT_FALSE(r.scatter[2].residual().defined());
  EXPECT_TRUE(at::allclose(r.gather.residual(), values({7, 8, 9, 10}) / 3));
}

TEST(CodedFeedbackTest, NothingOwedStartsEveryResidualAtZero) {
  FeedbackResiduals r;
  carry_residuals(r, 10, 0, -1, 3, 0);
  ASSERT_EQ(r.scatter.size(), 3u);
  for (const auto& s : r.scatter)
    EXPECT_FALSE(s.residual().defined());
  EXPECT_FALSE(r.gather.residual().defined());
  EXPECT_THROW(carry_residuals(r, 10, 3, 0, 2, 2), std::invalid_argument);
}

}  // namespace
}  // namespace dtrain::parallel
