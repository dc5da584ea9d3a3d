#include "dtrain/data/transforms.h"

#include <ATen/ATen.h>

#include <array>
#include <cmath>
#include <vector>

namespace dtrain::data {
namespace {
at::Tensor to_unit_float(const at::Tensor& images) {
  return images.scalar_type() == at::kByte ? images.to(at::kFloat).div_(255.0)
                                           : images.to(at::kFloat);
}

// Bytes take 256 values: the statistics come from a histogram per channel, each value as
// to_unit_float makes it (a float), summed in double. Through tensors a whole copy in double
// (376 MB for Fashion-MNIST) took most of a process's data loading.
Normalization byte_channel_stats(const at::Tensor& images) {
  const at::Tensor x = images.contiguous();
  const int64_t n = x.size(0), channels = x.size(1), plane = x[0][0].numel();
  std::vector<std::array<int64_t, 256>> counts(static_cast<size_t>(channels));
  for (auto& c : counts)
    c.fill(0);
  const uint8_t* p = x.data_ptr<uint8_t>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t k = 0; k < plane; ++k)
        ++counts[static_cast<size_t>(c)][*p++];
  Normalization out;
  const auto values = static_cast<double>(n * plane);
  for (const auto& count : counts) {
    double sum = 0, squares = 0;
    for (int v = 0; v < 256; ++v)
      sum += static_cast<double>(count[v]) * static_cast<double>(static_cast<float>(v) / 255.0f);
    const double mean = sum / values;
    for (int v = 0; v < 256; ++v) {
      const double d = static_cast<double>(static_cast<float>(v) / 255.0f) - mean;
      squares += static_cast<double>(count[v]) * d * d;
    }
    out.mean.push_back(mean);
    out.std.push_back(std::max(1e-6, std::sqrt(squares / std::max(1.0, values - 1))));
  }
  return out;
}

}  // namespace

Normalization channel_stats(const at::Tensor& images) {
  if (images.scalar_type() == at::kByte && images.dim() >= 2 && images.numel() > 0)
    return byte_channel_stats(images);
  Normalization n;
  const int64_t channels = images.size(1);
  for (int64_t c = 0; c < channels; ++c) {
    const at::Tensor x = to_unit_float(images.select(1, c)).to(at::kDouble);
    n.mean.push_back(x.mean().item<double>());
    n.std.push_back(std::max(1e-6, x.std().item<double>()));
  }
  return n;
}

at::Tensor make_batch(const at::Tensor& images, const Normalization& norm, const Augment& augment,
                      at::Generator& gen) {
  if (images.scalar_type() == at::kLong) return images;
  at::Tensor x = to_unit_float(images);
  const int64_t b = x.size(0), h = x.size(2), w = x.size(3);
  if (augment.crop_padding > 0) {
    const int64_t p = augment.crop_padding;
    const at::Tensor padded = at::constant_pad_nd(x, {p, p, p, p}, 0);
    const at::Tensor offsets = at::randint(0, 2 * p + 1, {b, 2}, gen, at::kLong);
    const int64_t* off = offsets.data_ptr<int64_t>();
    at::Tensor out = at::empty_like(x);
    for (int64_t i = 0; i < b; ++i) {
      out[i].copy_(padded[i].narrow(1, off[2 * i], h).narrow(2, off[2 * i + 1], w));
    }
    x = out;
  }
  if (augment.flip) {
    const at::Tensor flip = at::rand({b}, gen) < 0.5;
    x = at::where(flip.view({b, 1, 1, 1}), x.flip({3}), x);
  }
  const at::Tensor mean = at::tensor(norm.mean, at::kDouble).to(at::kFloat).view({1, -1, 1, 1});
  const at::Tensor std = at::tensor(norm.std, at::kDouble).to(at::kFloat).view({1, -1, 1, 1});
  return (x - mean) / std;
}

}  // namespace dtrain::data
