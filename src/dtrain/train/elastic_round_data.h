// Internal to the elastic trainer: which samples a replica's inner steps of a round train.
// A round hands out positions in the run's order (data/sample_queue.h): position p of epoch
// e is the p-th sample of that epoch's permutation of the dataset (n + i: the next epoch's
// i). Every rank of the run holds the same permutations (the run's seed), so positions are
// all that crosses between replicas, and between a replica's ranks.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

namespace dtrain::train {

class RoundData {
 public:
  RoundData(int64_t dataset_size, uint64_t seed) : dataset_size_(dataset_size), seed_(seed) {}
  // The dataset's indices of `positions` of `epoch`.
  std::vector<int64_t> indices(const std::vector<int64_t>& positions, int64_t epoch);
  // The augmentation's seed of a round's share (share_index: its place among the round's
  // trainers) on the replica's rank `place`.
  uint64_t augment_seed(int64_t round, int64_t share_index, int place) const;

 private:
  const std::vector<int64_t>& permutation(int64_t epoch);

  int64_t dataset_size_;
  uint64_t seed_;
  std::map<int64_t, std::vector<int64_t>> permutations_;  // the last epoch or two
};

}  // namespace dtrain::train
