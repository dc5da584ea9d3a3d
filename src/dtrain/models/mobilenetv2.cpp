// mobilenetv2, CIFAR variant (Sandler et al. 2018; torchvision's layers and init): the stem
// and the second stage keep stride 1 for 32x32 inputs; each inverted residual is a block;
// the 1x1 head conv to 1280 channels is its own block before the classifier (pool + linear),
// so the "first layer" output is 32 x H x W and the "last layer" input 1280 x H/8 x W/8.
// 2,236,682 parameters for 10 classes at width 1.
#include "dtrain/models/layers.h"
#include "dtrain/models/registry.h"

namespace dtrain::models {
namespace {

int64_t make_divisible(double v, int64_t divisor = 8) {
  int64_t out =
      std::max<int64_t>(divisor, static_cast<int64_t>(v + divisor / 2.0) / divisor * divisor);
  if (out < 0.9 * v) out += divisor;
  return out;
}

struct InvertedResidualImpl : torch::nn::Cloneable<InvertedResidualImpl> {
  InvertedResidualImpl(int64_t in, int64_t out, int64_t stride, int64_t expand)
      : in_(in), out_(out), stride_(stride), expand_(expand) {
    reset();
  }
  void reset() override {
    const int64_t hidden = in_ * expand_;
    body = register_module("body", torch::nn::Sequential());
    if (expand_ != 1) body->push_back("expand", conv_bn(in_, hidden, 1, 1, 1, true));
    body->push_back("depthwise", conv_bn(hidden, hidden, 3, stride_, hidden, true));
    body->push_back("project", conv_bn(hidden, out_, 1, 1, 1, true, /*activation=*/false));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor y = body->forward(x);
    return (stride_ == 1 && in_ == out_) ? x + y : y;
  }
  int64_t in_, out_, stride_, expand_;
  torch::nn::Sequential body{nullptr};
};
TORCH_MODULE(InvertedResidual);

}  // namespace

torch::nn::Sequential make_mobilenetv2(const ModelConfig& c) {
  // (expansion, channels, repeats, stride); strides of the stem and stage 2 are 1 on CIFAR.
  const int64_t settings[7][4] = {{1, 16, 1, 1}, {6, 24, 2, 1},  {6, 32, 3, 2}, {6, 64, 4, 2},
                                  {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1}};
  int64_t in = make_divisible(32 * c.width);
  const int64_t last = make_divisible(1280 * std::max(1.0, c.width));
  torch::nn::Sequential m;
  m->push_back("stem", conv_bn(c.in_channels, in, 3, 1, 1, true));
  int index = 0;
  for (const auto& s : settings) {
    const int64_t out = make_divisible(s[1] * c.width);
    for (int64_t r = 0; r < s[2]; ++r) {
      m->push_back("ir" + std::to_string(index++),
                   InvertedResidual(in, out, r == 0 ? s[3] : 1, s[0]));
      in = out;
    }
  }
  m->push_back("head", conv_bn(in, last, 1, 1, 1, true));
  // Pooling belongs to the classifier block, so the last boundary carries the head's
  // 1280 x H/8 x W/8 activations, as in a client/server split.
  m->push_back("classifier",
               Stack(torch::nn::AdaptiveAvgPool2d(1), torch::nn::Flatten(), torch::nn::Dropout(0.2),
                     torch::nn::Linear(last, c.num_classes)));
  init_like_torchvision_mobilenet(*m);
  return m;
}

extern const ModelFamily kMobilenetV2Model{
    "mobilenetv2",
    "CIFAR MobileNetV2: inverted residuals as blocks, 1280-channel head",
    make_mobilenetv2,
    ModelInput::kImage,
    {1, 28, 28}};

}  // namespace dtrain::models
