// The coded mean (comm/coded_allreduce.h) with a codec and error feedback, as DDP's
// compressed buckets and DiLoCo's outer exchange use it. With 2 ranks, one message each way
// (coded_all_gather_mean: the whole vector coded once, its residual `gather`); with more,
// the scatter-gather (coded_all_reduce_mean: each destination's piece keeps its own
// residual, and the owner's coded average one more).
#pragma once

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "dtrain/compress/codec.h"
#include "dtrain/compress/error_feedback.h"

namespace dtrain::comm {
class Group;
}

namespace dtrain::parallel {

struct FeedbackResiduals {
  std::vector<compress::ErrorFeedback> scatter;  // per peer: size it to the group
  compress::ErrorFeedback gather;

  // Nothing owed (every residual starts at zero again), for a group of `world` ranks.
  void reset(int world) {
    scatter.assign(static_cast<size_t>(std::max(0, world)), compress::ErrorFeedback{});
    gather = compress::ErrorFeedback{};
  }
};

// Whether coded_mean_with_feedback over `world` ranks codes each rank's whole vector once, in
// one message each way (2 ranks), rather than scatter then gather.
constexpr bool codes_whole_vectors(int world) {
  return world == 2;
}

// The residuals coded_mean_with_feedback keeps for `count` values on `rank` of `world`
// ranks: the length of each peer's scatter residual (-1 where none is kept: this rank's,
// and every rank's with 2 ranks) and of the gather's.
struct ResidualLengths {
  std::vector<int64_t> scatter;
  int64_t gather = 0;
};
ResidualLengths residual_lengths(int64_t count, int world, int rank);

// The residuals of `rank` of a group of `from_world` ranks, carried into its place `to_rank`
// of a group of `to_world` (a membership change), for `count` values: what this rank still
// owes is kept coordinate by coordinate, where starting again would drop it. Its scatter
// residuals (and the whole vector's, with 2 ranks) are owed by its own contribution; an
// owner's gather residual (more than 2 ranks) is owed by the mean, and enters the
// contribution as `to_world` times itself; in the new group the part owed on this rank's own
// block (never coded in the scatter) becomes its gather residual, as the mean's share
// (1/to_world). `from_rank` -1: nothing is owed. Residuals are float32 CPU 1-D tensors.
void carry_residuals(FeedbackResiduals& residuals, int64_t count, int from_world, int from_rank,
                     int to_world, int to_rank);

// Averages the 1-D `values` over the group in place, every message coded with `codec`;
// returns the bytes this rank sent. Collective: every rank calls it with the same tags.
int64_t coded_mean_with_feedback(comm::Group& group, at::Tensor& values,
                                 const compress::Codec& codec, FeedbackResiduals& residuals,
                                 int scatter_tag, int gather_tag);

}  // namespace dtrain::parallel
