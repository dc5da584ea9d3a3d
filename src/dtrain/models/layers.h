// Internal: building blocks shared by the zoo's models.
#pragma once

#include <torch/nn.h>

namespace dtrain::models {

// A Sequential that can be a block of another Sequential (torch::nn::Sequential's own
// forward is a template, which AnyModule cannot hold).
struct StackImpl : torch::nn::SequentialImpl {
  using SequentialImpl::SequentialImpl;
  torch::Tensor forward(torch::Tensor x) { return SequentialImpl::forward(std::move(x)); }
};
TORCH_MODULE(Stack);

// conv -> batch norm -> activation, the unit of ResNet and MobileNet stems and heads.
Stack conv_bn(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t groups, bool relu6,
              bool activation = true);

// Kaiming-normal (fan_out) convolutions, unit batch norms, N(0, 0.01) linears: the
// torchvision initialisation of MobileNetV2.
void init_like_torchvision_mobilenet(torch::nn::Module& module);

}  // namespace dtrain::models
