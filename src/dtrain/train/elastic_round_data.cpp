#include "dtrain/train/elastic_round_data.h"

#include "dtrain/data/sample_queue.h"
#include "dtrain/data/sampler.h"

namespace dtrain::train {

std::vector<int64_t> RoundData::indices(const std::vector<int64_t>& positions, int64_t epoch) {
  std::vector<int64_t> out;
  out.reserve(positions.size());
  for (const int64_t p : positions) {
    const data::EpochPosition at = data::locate(epoch, p, dataset_size_);
    out.push_back(permutation(at.epoch)[static_cast<size_t>(at.index)]);
  }
  return out;
}

uint64_t RoundData::augment_seed(int64_t round, int64_t share_index, int place) const {
  return seed_ * 7777 + static_cast<uint64_t>(round) * 1000003ull +
         static_cast<uint64_t>(share_index) + static_cast<uint64_t>(place) * 7919ull;
}

const std::vector<int64_t>& RoundData::permutation(int64_t epoch) {
  auto it = permutations_.find(epoch);
  if (it != permutations_.end()) return it->second;
  if (permutations_.size() >= 2) permutations_.erase(permutations_.begin());
  data::SamplerConfig sc;
  sc.dataset_size = dataset_size_;
  sc.seed = seed_;
  return permutations_.emplace(epoch, data::shard_indices(sc, epoch)).first->second;
}

}  // namespace dtrain::train
