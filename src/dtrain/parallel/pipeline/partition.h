// Partition: which contiguous blocks of a model each pipeline stage runs, and on which rank.
//
// - linear: S stages on ranks 0..S-1, a plain chain.
// - ushape: the client (rank 0) runs the first F and the last L blocks, so raw inputs,
//   labels and the loss never leave it; the middle blocks are split over the servers
//   (ranks 1..S-1). Stages: client head, server 1, ..., server S-1, client tail.
//
// Block counts per stage come from explicit counts or from per-block weights (parameter
// counts or measured times) by a contiguous split that minimizes the heaviest stage.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dtrain::parallel::pipeline {

enum class Placement { kLinear, kUShape };
Placement parse_placement(const std::string& name);  // "linear" | "ushape"
std::string to_string(Placement placement);

struct StageBlocks {
  int rank;
  int64_t begin, end;  // blocks [begin, end)
};

struct Partition {
  std::vector<StageBlocks> stages;  // in data-flow order
  std::vector<int> stage_ranks() const;
};

// Splits `weights` (one per block, >= 0) into `parts` contiguous non-empty runs minimizing
// the largest run sum; returns the run lengths. Throws when parts > blocks or parts < 1.
std::vector<int64_t> balance_by_weight(const std::vector<double>& weights, int parts);

// Builds the partition. `counts`: blocks per stage (linear: one per rank; ushape: one per
// server); when empty, `weights` decide. `client_first`, `client_last`: the U-shape's F, L.
// Throws std::invalid_argument naming the problem (counts that do not add up, a stage
// without blocks, fewer than 2 ranks for ushape...).
Partition make_partition(Placement placement, int ranks, int64_t blocks,
                         const std::vector<int64_t>& counts, const std::vector<double>& weights,
                         int64_t client_first = 1, int64_t client_last = 1);

}  // namespace dtrain::parallel::pipeline
