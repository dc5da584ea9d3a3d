// The small model and optimizer whose checkpoint shards the checkpoint_shard target fuzzes;
// the seed program writes shards of the same one.
#pragma once

#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

namespace dtrain::fuzz {

// The model and optimizer of the checkpoint_shard target: parameters, buffers (BatchNorm's
// running statistics) and optimizer state (momentum), so every part of a shard is read.
struct TinyState {
  torch::nn::Sequential module{torch::nn::Linear(3, 2), torch::nn::BatchNorm1d(2)};
  torch::optim::SGD optimizer{module->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9)};
};

}  // namespace dtrain::fuzz
