#include "dtrain/models/registry.h"

#include <torch/torch.h>

#include "dtrain/models/batch_context.h"
#include "dtrain/models/zoo.h"

namespace dtrain::models {

std::vector<std::pair<std::string, std::string>> model_catalog() {
  return {{"mlp", "2 hidden layers of 512 x width, ReLU"},
          {"cnn", "2 conv+pool layers (32, 64) and fc 128, for 28x28"},
          {"resnet18", "CIFAR ResNet-18: 3x3 stem, no max-pool, BasicBlocks as blocks"},
          {"mobilenetv2", "CIFAR MobileNetV2: inverted residuals as blocks, 1280-channel head"},
          {"roberta",
           "RoBERTa encoder (roberta-base by default): embeddings, each layer, the "
           "classification head as blocks; reads token ids"}};
}

bool takes_tokens(const ModelConfig& config) {
  return config.name == "roberta";
}

at::Tensor sample_input(const ModelConfig& config, int64_t batch) {
  std::vector<int64_t> shape{batch};
  shape.insert(shape.end(), config.input_shape.begin(), config.input_shape.end());
  return takes_tokens(config) ? torch::zeros(shape, torch::kLong) : torch::zeros(shape);
}

torch::nn::Sequential make_model(const ModelConfig& c) {
  if (c.num_classes < 1) throw std::invalid_argument("--num-classes must be at least 1");
  if (c.name == "roberta") return make_roberta(c);
  if (c.input_shape.size() != 3 || c.input_shape[0] != c.in_channels) {
    throw std::invalid_argument("input shape must be C,H,W with C = --in-channels");
  }
  if (!(c.width > 0)) throw std::invalid_argument("--width must be positive");
  if (c.name == "mlp") return make_mlp(c);
  if (c.name == "cnn") return make_cnn(c);
  if (c.name == "resnet18") return make_resnet18(c);
  if (c.name == "mobilenetv2") return make_mobilenetv2(c);
  std::string names;
  for (const auto& [n, d] : model_catalog())
    names += (names.empty() ? "" : ", ") + n;
  throw std::invalid_argument("unknown model '" + c.name + "' (zoo: " + names + ")");
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
