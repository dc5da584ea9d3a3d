#include "dtrain/models/registry.h"

#include <torch/torch.h>

#include "dtrain/base/table.h"
#include "dtrain/models/batch_context.h"

namespace dtrain::models {

#define DTRAIN_MODEL_TABLE(ROW, T) \
  ROW(T, kMlpModel)                \
  ROW(T, kCnnModel)                \
  ROW(T, kResnet18Model)           \
  ROW(T, kMobilenetV2Model)        \
  ROW(T, kRobertaModel)

DTRAIN_TABLE(ModelFamily, model_families, DTRAIN_MODEL_TABLE)

const ModelFamily* find_model(const std::string& name) {
  for (const ModelFamily* family : model_families())
    if (family->name == name) return family;
  return nullptr;
}

std::string model_names() {
  std::string names;
  for (const ModelFamily* family : model_families())
    names += (names.empty() ? "" : ", ") + family->name;
  return names;
}

bool takes_tokens(const ModelConfig& config) {
  const ModelFamily* family = find_model(config.name);
  return family != nullptr && family->input == ModelInput::kTokens;
}

at::Tensor sample_input(const ModelConfig& config, int64_t batch) {
  std::vector<int64_t> shape{batch};
  shape.insert(shape.end(), config.input_shape.begin(), config.input_shape.end());
  return takes_tokens(config) ? torch::zeros(shape, torch::kLong) : torch::zeros(shape);
}

torch::nn::Sequential make_model(const ModelConfig& c) {
  if (c.num_classes < 1) throw std::invalid_argument("--num-classes must be at least 1");
  const ModelFamily* family = find_model(c.name);
  if (family == nullptr)
    throw std::invalid_argument("unknown model '" + c.name + "' (zoo: " + model_names() + ")");
  if (family->input == ModelInput::kImage) {
    if (c.input_shape.size() != 3 || c.input_shape[0] != c.in_channels) {
      throw std::invalid_argument("input shape must be C,H,W with C = --in-channels");
    }
    if (!(c.width > 0)) throw std::invalid_argument("--width must be positive");
  }
  return family->build(c);
}

int64_t parameter_count(const torch::nn::Module& module) {
  int64_t n = 0;
  for (const auto& p : module.parameters())
    n += p.numel();
  return n;
}

std::vector<BlockInfo> describe(torch::nn::Sequential& model, const at::Tensor& input) {
  torch::NoGradGuard no_grad;
  const bool was_training = model->is_training();
  model->eval();
  const AttentionMaskScope every_position_real{at::Tensor()};
  torch::Tensor x = input;
  std::vector<BlockInfo> out;
  const auto names = model->named_children();
  size_t i = 0;
  for (auto& block : *model) {
    x = block.forward(x);
    out.push_back({names[i].key(), parameter_count(*block.ptr()), x.sizes().slice(1).vec()});
    ++i;
  }
  model->train(was_training);
  return out;
}

}  // namespace dtrain::models
