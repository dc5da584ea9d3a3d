// The model zoo. Every model is a torch::nn::Sequential of named blocks, so a pipeline can
// cut it between any two blocks and DDP can wrap it whole. Blocks take and return one
// tensor.
#pragma once

#include <torch/nn/modules/container/sequential.h>

#include <string>
#include <vector>

namespace dtrain::models {

struct ModelConfig {
  std::string name = "cnn";
  int64_t in_channels = 1;
  int64_t num_classes = 10;
  double width = 1.0;  // mobilenetv2 width multiplier; mlp/cnn scale their widths
  int64_t depth = 2;   // mlp: hidden layers (each its own block)
  std::vector<int64_t> input_shape{1, 28, 28};  // C, H, W (mlp flattens it)
};

// Builds the named model, initialised as its reference architecture is. Throws
// std::invalid_argument for unknown names or unusable shapes.
torch::nn::Sequential make_model(const ModelConfig& config);

// Names of the models in the zoo, with a one-line description each.
std::vector<std::pair<std::string, std::string>> model_catalog();

struct BlockInfo {
  std::string name;
  int64_t parameters;
  std::vector<int64_t> output_shape;  // for one sample (no batch dimension)
};

// Runs one sample through the blocks and reports each block's output shape.
std::vector<BlockInfo> describe(torch::nn::Sequential& model,
                                const std::vector<int64_t>& input_shape);

int64_t parameter_count(const torch::nn::Module& module);

}  // namespace dtrain::models
