// A replica of several ranks splits its positions between them (train/elastic_ranks.h):
// checked against the contract's own statement, position by position, for every share size
// up to a few steps and every rank count up to 4.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "dtrain/train/elastic_ranks.h"

namespace dtrain {
namespace {

TEST(RankSliceTest, EveryStepSplitsItsPositionsAndStepsAreAPrefix) {
  const int64_t batch = 4;
  for (int ranks = 1; ranks <= 4; ++ranks) {
    for (int64_t n = 0; n <= 3 * batch * ranks + 3; ++n) {
      std::vector<int64_t> share(static_cast<size_t>(n));
      std::iota(share.begin(), share.end(), 1000);  // positions are not their indices
      std::vector<train::RankSlice> slices;
      for (int place = 0; place < ranks; ++place)
        slices.push_back(train::rank_slice(share, place, ranks, batch));
      const int64_t steps = (n + batch * ranks - 1) / (batch * ranks);
      std::vector<int64_t> trained;  // in step order, then rank order: must be the share
      for (int64_t step = 0; step < steps; ++step) {
        for (int place = 0; place < ranks; ++place) {
          const train::RankSlice& s = slices[static_cast<size_t>(place)];
          ASSERT_EQ(s.steps, steps) << n << " " << ranks;
          const auto total = static_cast<int64_t>(s.positions.size());
          const int64_t from = step * batch, to = std::min(total, from + batch);
          ASSERT_LT(from, total) << "rank " << place << " has no batch at step " << step;
          if (s.filler && step + 1 == steps) {
            EXPECT_EQ(to - from, 1);
            EXPECT_EQ(s.positions[static_cast<size_t>(from)],
                      share[static_cast<size_t>(step * batch * ranks)]);
            continue;
          }
          if (step + 1 < steps) {
            EXPECT_EQ(to - from, batch);  // a full batch but the last
          }
          trained.insert(trained.end(), s.positions.begin() + from, s.positions.begin() + to);
        }
      }
      EXPECT_EQ(trained, share) << "share of " << n << " over " << ranks << " ranks";
      // The first rank is never a filler; a filler only where the last step is short of ranks.
      EXPECT_FALSE(slices[0].filler);
      const int64_t last = n - (steps - 1) * batch * ranks;
      for (int place = 0; place < ranks; ++place) {
        EXPECT_EQ(slices[static_cast<size_t>(place)].filler, steps > 0 && place >= last)
            << n << " " << ranks << " " << place;
      }
    }
  }
}

}  // namespace
}  // namespace dtrain
