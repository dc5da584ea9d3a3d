// The small messages of `--compress-grad auto` (ddp_codec_tuner.h), each one definition
// with its layout (comm/small_message.h).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace dtrain::parallel {

// Rank 0's choice among the candidates, broadcast to every rank: the codec, and the rival
// of a runoff with its pairs of steps (runoff_other -1: no runoff). int64 [chosen, other,
// pairs].
struct TunerDecision {
  int64_t chosen = -1;
  int64_t runoff_other = -1;
  int64_t runoff_pairs = -1;

  static constexpr int64_t kValues = 3;
  at::Tensor to_message() const;
  // Throws std::runtime_error (naming `from`) unless chosen is a candidate (< candidates),
  // the rival -1 or a candidate, and a runoff's pairs within [min_pairs, max_pairs].
  static TunerDecision from_message(const at::Tensor& message, int64_t candidates,
                                    int64_t min_pairs, int64_t max_pairs, const std::string& from);
};

// What the last synchronized step's exchange moved on each link of rank 0, both ways, as
// every rank sees it after a sum over ranks: rank r fills its row's outbound half (what it
// received from rank 0), rank 0 the inbound halves (what it received from each rank).
// float64 [ranks x 4]: per rank r, [bytes 0->r, busy seconds 0->r, bytes r->0, busy seconds
// r->0] (row 0 unused). Busy: the union of the receives' post -> completion intervals
// (comm::LinkCounters::active_s).
struct StepTraffic {
  struct Way {
    double bytes = 0, busy_s = 0;
  };
  struct Link {
    Way from_rank0, to_rank0;
  };
  std::vector<Link> links;  // by rank; links[0] unused

  at::Tensor to_message() const;
  // Throws std::runtime_error (naming `from`) on a wrong size, or a negative or non-finite
  // value.
  static StepTraffic from_message(const at::Tensor& message, int64_t ranks,
                                  const std::string& from);
};

}  // namespace dtrain::parallel
