#include "dtrain/data/sampler.h"

#include <ATen/ATen.h>

#include <stdexcept>

namespace dtrain::data {

int64_t shard_size(const SamplerConfig& c) {
  if (c.world_size < 1 || c.rank < 0 || c.rank >= c.world_size || c.dataset_size < 0) {
    throw std::invalid_argument("sampler: need 0 <= rank < world_size and a dataset size >= 0");
  }
  return c.drop_last ? c.dataset_size / c.world_size
                     : (c.dataset_size + c.world_size - 1) / c.world_size;
}

std::vector<int64_t> shard_indices(const SamplerConfig& c, int64_t epoch) {
  const int64_t per_rank = shard_size(c);
  std::vector<int64_t> order(static_cast<size_t>(c.dataset_size));
  if (c.shuffle) {
    at::Generator gen =
        at::detail::createCPUGenerator(c.seed * 1000003 + static_cast<uint64_t>(epoch));
    const at::Tensor perm = at::randperm(c.dataset_size, gen, at::kLong);
    std::memcpy(order.data(), perm.data_ptr<int64_t>(), order.size() * sizeof(int64_t));
  } else {
    for (size_t i = 0; i < order.size(); ++i)
      order[i] = static_cast<int64_t>(i);
  }
  const int64_t total = per_rank * c.world_size;
  for (int64_t i = c.dataset_size; i < total; ++i) {
    order.push_back(order[static_cast<size_t>(i % std::max<int64_t>(1, c.dataset_size))]);
  }
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(per_rank));
  for (int64_t i = c.rank; i < total; i += c.world_size)
    mine.push_back(order[static_cast<size_t>(i)]);
  return mine;
}

}  // namespace dtrain::data
