#include "dtrain/models/layers.h"

namespace dtrain::models {

Stack conv_bn(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t groups, bool relu6,
              bool activation) {
  Stack s;
  s->push_back("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, kernel)
                                             .stride(stride)
                                             .padding((kernel - 1) / 2)
                                             .groups(groups)
                                             .bias(false)));
  s->push_back("bn", torch::nn::BatchNorm2d(out));
  if (activation) {
    if (relu6) {
      s->push_back("act", torch::nn::ReLU6(torch::nn::ReLU6Options().inplace(true)));
    } else {
      s->push_back("act", torch::nn::ReLU(torch::nn::ReLUOptions().inplace(true)));
    }
  }
  return s;
}

void init_like_torchvision_mobilenet(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  for (auto& m : module.modules(/*include_self=*/false)) {
    if (auto* conv = m->as<torch::nn::Conv2dImpl>()) {
      torch::nn::init::kaiming_normal_(conv->weight, 0.0, torch::kFanOut);
      if (conv->bias.defined()) conv->bias.zero_();
    } else if (auto* bn = m->as<torch::nn::BatchNorm2dImpl>()) {
      bn->weight.fill_(1.0);
      bn->bias.zero_();
    } else if (auto* fc = m->as<torch::nn::LinearImpl>()) {
      torch::nn::init::normal_(fc->weight, 0.0, 0.01);
      fc->bias.zero_();
    }
  }
}

}  // namespace dtrain::models
