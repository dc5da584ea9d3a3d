// resnet18, the CIFAR variant (He et al. 2016, as in kuangliu/pytorch-cifar):
// 3x3 stem without max-pool, four stages of two BasicBlocks (64, 128, 256, 512 channels),
// a classifier block (global average pool + linear). 11,173,962 parameters for 10 classes.
#include "dtrain/models/layers.h"
#include "dtrain/models/registry.h"

namespace dtrain::models {
namespace {

struct BasicBlockImpl : torch::nn::Cloneable<BasicBlockImpl> {
  BasicBlockImpl(int64_t in, int64_t out, int64_t stride) : in_(in), out_(out), stride_(stride) {
    reset();
  }
  void reset() override {
    body = register_module("body", torch::nn::Sequential());
    body->push_back("conv1", conv_bn(in_, out_, 3, stride_, 1, false));
    body->push_back("conv2", conv_bn(out_, out_, 3, 1, 1, false, /*activation=*/false));
    shortcut = register_module("shortcut", torch::nn::Sequential());
    if (stride_ != 1 || in_ != out_) {
      shortcut->push_back("proj", conv_bn(in_, out_, 1, stride_, 1, false, /*activation=*/false));
    }
  }
  torch::Tensor forward(const torch::Tensor& x) {
    const torch::Tensor skip = shortcut->is_empty() ? x : shortcut->forward(x);
    return torch::relu(body->forward(x) + skip);
  }
  int64_t in_, out_, stride_;
  torch::nn::Sequential body{nullptr}, shortcut{nullptr};
};
TORCH_MODULE(BasicBlock);

}  // namespace

torch::nn::Sequential make_resnet18(const ModelConfig& c) {
  torch::nn::Sequential m;
  m->push_back("stem", conv_bn(c.in_channels, 64, 3, 1, 1, false));
  int64_t in = 64;
  const int64_t widths[] = {64, 128, 256, 512};
  for (int stage = 0; stage < 4; ++stage) {
    for (int b = 0; b < 2; ++b) {
      const int64_t stride = (stage > 0 && b == 0) ? 2 : 1;
      m->push_back("layer" + std::to_string(stage + 1) + "_" + std::to_string(b),
                   BasicBlock(in, widths[stage], stride));
      in = widths[stage];
    }
  }
  m->push_back("classifier", Stack(torch::nn::AdaptiveAvgPool2d(1), torch::nn::Flatten(),
                                   torch::nn::Linear(512, c.num_classes)));
  return m;
}

extern const ModelFamily kResnet18Model{
    "resnet18",
    "CIFAR ResNet-18: 3x3 stem, no max-pool, BasicBlocks as blocks",
    make_resnet18,
    ModelInput::kImage,
    {1, 28, 28}};

}  // namespace dtrain::models
