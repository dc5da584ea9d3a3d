#include "dtrain/models/registry.h"

#include <torch/torch.h>

#include "dtrain/models/zoo.h"

namespace dtrain::models {

std::vector<std::pair<std::string, std::string>> model_catalog() {
  return {{"mlp", "2 hidden layers of 512 x width, ReLU"},
          {"cnn", "2 conv+pool layers (32, 64) and fc 128, for 28x28"},
          {"resnet18", "CIFAR ResNet-18: 3x3 stem, no max-pool, BasicBlocks as blocks"},
          {"mobilenetv2", "CIFAR MobileNetV2: inverted residuals as blocks, 1280-channel head"}};
}

torch::nn::Sequential make_model(const ModelConfig& c) {
  if (c.input_shape.size() != 3 || c.input_shape[0] != c.in_channels) {
    throw std::invalid_argument("input shape must be C,H,W with C = --in-channels");
  }
  if (c.num_classes < 1) throw std::invalid_argument("--num-classes must be at least 1");
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

std::vector<BlockInfo> describe(torch::nn::Sequential& model,
                                const std::vector<int64_t>& input_shape) {
  torch::NoGradGuard no_grad;
  const bool was_training = model->is_training();
  model->eval();
  std::vector<int64_t> shape{1};
  shape.insert(shape.end(), input_shape.begin(), input_shape.end());
  torch::Tensor x = torch::zeros(shape);
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
