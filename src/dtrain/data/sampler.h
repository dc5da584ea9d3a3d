// Distributed sampler: every rank draws the same permutation of the dataset for an epoch
// (from seed and epoch), pads or drops the tail to a multiple of the world size, and takes
// every world_size-th index starting at its rank, so shards are disjoint and, with padding,
// cover the whole set.
#pragma once

#include <cstdint>
#include <vector>

namespace dtrain::data {

struct SamplerConfig {
  int64_t dataset_size = 0;
  int rank = 0;
  int world_size = 1;
  uint64_t seed = 0;
  bool shuffle = true;
  bool drop_last = false;  // false: pad with the first indices of the permutation
};

// Indices for this rank in this epoch. Throws std::invalid_argument on bad configs.
std::vector<int64_t> shard_indices(const SamplerConfig& config, int64_t epoch);

// Samples per rank per epoch.
int64_t shard_size(const SamplerConfig& config);

}  // namespace dtrain::data
