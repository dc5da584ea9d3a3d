// Test support: a small mlp (input 1x6x6, 5 classes) from the zoo, seeded.
#pragma once

#include <torch/torch.h>

#include "dtrain/models/registry.h"

namespace dtrain::testing {

inline torch::nn::Sequential tiny_mlp(uint64_t seed, int64_t depth, int64_t hidden = 32) {
  torch::manual_seed(seed);
  models::ModelConfig mc;
  mc.name = "mlp";
  mc.depth = depth;
  mc.width = static_cast<double>(hidden) / 512;
  mc.input_shape = {1, 6, 6};
  mc.in_channels = 1;
  mc.num_classes = 5;
  return models::make_model(mc);
}

}  // namespace dtrain::testing
