// Striped links (Group::set_streams): every connection carries a piece of every striped
// message, so none idles while the others work (request_state.h, striped_piece_bytes).
#include <gtest/gtest.h>

#include "dtrain/comm/request_state.h"
#include "dtrain/comm/world.h"

namespace dtrain::comm {
namespace {

TEST(StripingTest, EveryConnectionCarriesAPieceOfEveryStripedMessage) {
  for (int k = 2; k <= kMaxStreams; ++k) {
    for (const int64_t bytes :
         {kStripeMinBytes, kStripeMinBytes + 1, int64_t{1} << 20, (int64_t{1} << 20) + 12345,
          int64_t{3} << 20, int64_t{64} << 20, (int64_t{256} << 20) - 1}) {
      const int64_t piece = striped_piece_bytes(bytes, k);
      EXPECT_EQ(piece % kStripeGrain, 0) << bytes << " over " << k;
      EXPECT_EQ((bytes + piece - 1) / piece, k)
          << bytes << " over " << k << ": pieces of " << piece;
    }
  }
}

}  // namespace
}  // namespace dtrain::comm
