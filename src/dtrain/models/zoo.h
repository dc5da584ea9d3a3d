// Internal: one factory per model file.
#pragma once

#include <torch/nn/modules/container/sequential.h>

#include "dtrain/models/registry.h"

namespace dtrain::models {

torch::nn::Sequential make_mlp(const ModelConfig& c);
torch::nn::Sequential make_cnn(const ModelConfig& c);
torch::nn::Sequential make_resnet18(const ModelConfig& c);
torch::nn::Sequential make_mobilenetv2(const ModelConfig& c);
torch::nn::Sequential make_roberta(const ModelConfig& c);

}  // namespace dtrain::models
