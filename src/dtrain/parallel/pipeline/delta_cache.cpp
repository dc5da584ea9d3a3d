#include "dtrain/parallel/pipeline/delta_cache.h"

#include <ATen/ATen.h>

#include <stdexcept>
#include <string>

namespace dtrain::parallel::pipeline {

int64_t DeltaCache::bytes_for(int64_t samples, int64_t sample_numel, at::ScalarType dtype) {
  return samples * sample_numel * static_cast<int64_t>(c10::elementSize(dtype));
}

DeltaCache::DeltaCache(int64_t samples, std::vector<int64_t> sample_shape, at::ScalarType dtype)
    : sample_shape_(std::move(sample_shape)), seen_(static_cast<size_t>(samples), 0) {
  if (dtype != at::kFloat && dtype != at::kBFloat16 && dtype != at::kHalf)
    throw std::invalid_argument("the delta cache holds float32, bfloat16 or float16");
  int64_t numel = 1;
  for (const int64_t d : sample_shape_)
    numel *= d;
  values_ = at::zeros({samples, numel}, at::TensorOptions().dtype(dtype));
}

at::Tensor DeltaCache::host_ids(const at::Tensor& ids) const {
  const at::Tensor host = ids.to(at::kCPU, at::kLong).contiguous().view({-1});
  const auto* p = host.data_ptr<int64_t>();
  const auto n = static_cast<int64_t>(seen_.size());
  for (int64_t i = 0; i < host.numel(); ++i) {
    if (p[i] < 0 || p[i] >= n)
      throw std::out_of_range("delta cache: sample index " + std::to_string(p[i]) +
                              " is outside the training set's " + std::to_string(n));
  }
  return host;
}

bool DeltaCache::all_seen(const at::Tensor& ids) const {
  const at::Tensor host = host_ids(ids);
  const auto* p = host.data_ptr<int64_t>();
  for (int64_t i = 0; i < host.numel(); ++i)
    if (!seen_[static_cast<size_t>(p[i])]) return false;
  return true;
}

at::Tensor DeltaCache::gather(const at::Tensor& ids, const c10::Device& device) const {
  const at::Tensor host = host_ids(ids);
  std::vector<int64_t> shape{host.numel()};
  shape.insert(shape.end(), sample_shape_.begin(), sample_shape_.end());
  return values_.index_select(0, host).to(device, at::kFloat).view(shape);
}

void DeltaCache::store(const at::Tensor& ids, const at::Tensor& values) {
  const at::Tensor host = host_ids(ids);
  if (values.size(0) != host.numel() || values.numel() != host.numel() * values_.size(1))
    throw std::invalid_argument("delta cache: values do not match the samples' shape");
  // Rounded where the values live (same rounding on every device), then moved.
  const at::Tensor rows =
      values.detach().to(values_.scalar_type()).to(at::kCPU).view({host.numel(), values_.size(1)});
  values_.index_copy_(0, host, rows);
  const auto* p = host.data_ptr<int64_t>();
  for (int64_t i = 0; i < host.numel(); ++i)
    seen_[static_cast<size_t>(p[i])] = 1;
}

}  // namespace dtrain::parallel::pipeline
