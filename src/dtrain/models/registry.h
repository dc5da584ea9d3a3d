// The model zoo. Every model is a torch::nn::Sequential of named blocks, so a pipeline can
// cut it between any two blocks and DDP can wrap it whole. Blocks take and return one
// tensor.
#pragma once

#include <torch/nn/modules/container/sequential.h>

#include <string>
#include <vector>

namespace dtrain::models {

// A transformer encoder's sizes (roberta). The roberta-base defaults are Hugging Face's
// RobertaConfig; the FFN is 4 x hidden unless set.
struct TransformerConfig {
  int64_t layers = 12;
  int64_t hidden = 768;
  int64_t heads = 12;
  int64_t ffn = 0;  // 0: 4 x hidden (3072 for roberta-base)
  int64_t vocab = 50265;
  int64_t max_positions = 514;  // learned positions; real ones start past the padding index
  int64_t pad_id = 1;
  double layer_norm_eps = 1e-5;
  double dropout = 0.1;  // hidden, attention probabilities and classifier
};

struct ModelConfig {
  std::string name = "cnn";
  int64_t in_channels = 1;
  int64_t num_classes = 10;
  double width = 1.0;  // mobilenetv2 width multiplier; mlp/cnn scale their widths
  int64_t depth = 2;   // mlp: hidden layers (each its own block)
  std::vector<int64_t> input_shape{1, 28, 28};  // C, H, W (mlp flattens it); text: {T}
  TransformerConfig transformer;                // roberta only
};

// One row of the model table (registry.cpp). A model is one file, which builds it and
// defines its row, and one line of the table; the CLI's help and `dtrain models` are
// generated from the rows.
enum class ModelInput { kImage, kTokens };  // C,H,W floats, or T token ids (int64)
struct ModelFamily {
  std::string name;
  std::string help;  // one line
  torch::nn::Sequential (*build)(const ModelConfig& config);
  ModelInput input;
  std::vector<int64_t> default_input;  // one sample's shape where the user gives none
  // The names a parameter may have in pretrained weight files (--weights), most likely
  // first; nullptr: dtrain's own name only.
  std::vector<std::string> (*weight_names)(const std::string& name) = nullptr;
};

// The rows in the order --help lists them.
const std::vector<const ModelFamily*>& model_families();
// The row named `name`; nullptr if none.
const ModelFamily* find_model(const std::string& name);
// "mlp, cnn, ...": the names, for help texts.
std::string model_names();

// Whether the model reads token ids ([B, T] int64) rather than images.
bool takes_tokens(const ModelConfig& config);

// A batch of `batch` zero inputs of the model's input shape and type (token id 0 for text).
at::Tensor sample_input(const ModelConfig& config, int64_t batch);

// Builds the named model, initialised as its reference architecture is. Throws
// std::invalid_argument for unknown names or unusable shapes.
torch::nn::Sequential make_model(const ModelConfig& config);

struct BlockInfo {
  std::string name;
  int64_t parameters;
  std::vector<int64_t> output_shape;  // for one sample (no batch dimension)
};

// Runs one sample (`input`, batch 1) through the blocks and reports each block's output
// shape.
std::vector<BlockInfo> describe(torch::nn::Sequential& model, const at::Tensor& input);

int64_t parameter_count(const torch::nn::Module& module);

}  // namespace dtrain::models
