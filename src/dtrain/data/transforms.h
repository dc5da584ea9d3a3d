// Batch transforms (the standard CIFAR recipe's): random crop with zero padding, random horizontal
// flip, per-channel normalization with the training set's mean and standard deviation.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <vector>

namespace dtrain::data {

struct Normalization {
  std::vector<double> mean, std;  // per channel, on the [0, 1] scale
};

// Mean and std per channel of uint8 ([0, 255] -> [0, 1]) or float images [N, C, H, W].
Normalization channel_stats(const at::Tensor& images);

struct Augment {
  int64_t crop_padding = 0;  // 0: no random crop
  bool flip = false;
};

// images [B, C, H, W] (uint8 scaled by 1/255, or float as is) -> normalized float32 batch,
// augmented with `gen` when training. Token ids (int64) pass through unchanged.
at::Tensor make_batch(const at::Tensor& images, const Normalization& norm, const Augment& augment,
                      at::Generator& gen);

}  // namespace dtrain::data
