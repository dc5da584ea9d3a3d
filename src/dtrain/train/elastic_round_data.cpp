#include "dtrain/train/elastic_round_data.h"

#include <cmath>
#include <stdexcept>
#include <string>

#include "dtrain/data/sample_queue.h"
#include "dtrain/data/sampler.h"
#include "dtrain/metrics/trace.h"

namespace dtrain::train {

RoundData::RoundData(const data::Dataset& train_set, data::Normalization norm,
                     data::Augment augment, int64_t batch_size, uint64_t seed)
    : train_set_(train_set),
      norm_(std::move(norm)),
      augment_(std::move(augment)),
      batch_size_(batch_size),
      seed_(seed) {}

data::EpochLoader RoundData::loader(const std::vector<int64_t>& positions, int64_t epoch,
                                    int64_t round, int64_t share_index, int place) {
  std::vector<int64_t> indices;
  indices.reserve(positions.size());
  for (const int64_t p : positions) {
    const data::EpochPosition at = data::locate(epoch, p, train_set_.size());
    indices.push_back(permutation(at.epoch)[static_cast<size_t>(at.index)]);
  }
  const uint64_t augment_seed = seed_ * 7777 + static_cast<uint64_t>(round) * 1000003ull +
                                static_cast<uint64_t>(share_index) +
                                static_cast<uint64_t>(place) * 7919ull;
  return data::EpochLoader(train_set_, std::move(indices), batch_size_, norm_, augment_,
                           augment_seed, 2);
}

const std::vector<int64_t>& RoundData::permutation(int64_t epoch) {
  auto it = permutations_.find(epoch);
  if (it != permutations_.end()) return it->second;
  if (permutations_.size() >= 2) permutations_.erase(permutations_.begin());
  data::SamplerConfig sc;
  sc.dataset_size = train_set_.size();
  sc.seed = seed_;
  return permutations_.emplace(epoch, data::shard_indices(sc, epoch)).first->second;
}

void RoundTally::add(const BatchResult& r) {
  totals[0] += r.loss_sum;
  totals[1] += static_cast<double>(r.correct);
  totals[2] += static_cast<double>(r.samples);
}

RoundTally& RoundTally::operator+=(const RoundTally& other) {
  for (size_t i = 0; i < totals.size(); ++i)
    totals[i] += other.totals[i];
  return *this;
}

BatchResult inner_step(Engine& engine, torch::optim::Optimizer& optimizer, const data::Batch& batch,
                       double lr, const StepPlan& plan, EpochStats& s) {
  optimizer.zero_grad();
  const BatchResult r = engine.train_batch(batch, lr, plan, s);
  const auto t = metrics::Clock::now();
  optimizer.step();
  s.time_optimizer_s += metrics::trace::span_since("compute", "optimizer step", t);
  return r;
}

void check_finite(const BatchResult& r, int64_t round) {
  if (!std::isfinite(r.loss_sum))
    throw std::runtime_error("training diverged: loss is " + std::to_string(r.loss_sum) +
                             " in round " + std::to_string(round) + " (lower --lr?)");
}

}  // namespace dtrain::train
