// Internal to the elastic trainer: a replica's inner steps of a round, the same on its leader
// (elastic_trainer.cpp) and its followers (elastic_follower.cpp). A round hands out positions
// in the run's order (data/sample_queue.h): position p of epoch e is the p-th sample of that
// epoch's permutation of the dataset (n + i: the next epoch's i). Every rank of the run holds
// the same permutations (the run's seed), so positions are all that crosses between
// replicas, and between a replica's ranks.
#pragma once

#include <torch/optim/optimizer.h>

#include <cstdint>
#include <map>
#include <vector>

#include "dtrain/data/loader.h"
#include "dtrain/train/engine.h"

namespace dtrain::train {

class RoundData {
 public:
  // `train_set` outlives this.
  RoundData(const data::Dataset& train_set, data::Normalization norm, data::Augment augment,
            int64_t batch_size, uint64_t seed);
  // The inner steps' batches of `positions` of `epoch`: round `round`'s share `share_index`
  // (its place among the round's trainers), on the replica's rank `place`.
  data::EpochLoader loader(const std::vector<int64_t>& positions, int64_t epoch, int64_t round,
                           int64_t share_index, int place);

 private:
  const std::vector<int64_t>& permutation(int64_t epoch);

  const data::Dataset& train_set_;
  data::Normalization norm_;
  data::Augment augment_;
  int64_t batch_size_;
  uint64_t seed_;
  std::map<int64_t, std::vector<int64_t>> permutations_;  // the last epoch or two
};

// Loss sum, correct and seen samples of inner steps, as sum_over_group adds them.
struct RoundTally {
  std::vector<double> totals = std::vector<double>(3, 0.0);
  void add(const BatchResult& r);
  RoundTally& operator+=(const RoundTally& other);
};

// One inner step: gradients cleared, the engine's forward and backward, the optimizer's step
// (its time in `s`).
BatchResult inner_step(Engine& engine, torch::optim::Optimizer& optimizer, const data::Batch& batch,
                       double lr, const StepPlan& plan, EpochStats& s);
// Throws where a step's loss is not finite (the replica diverged in round `round`).
void check_finite(const BatchResult& r, int64_t round);

}  // namespace dtrain::train
