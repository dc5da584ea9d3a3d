// The training objective, a parameter of every engine (as torch.distributed.pipelining takes
// loss_fn) instead of a call spelled out in each of them.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <string>

namespace dtrain::models {

enum class LossKind { kCrossEntropy };

LossKind parse_loss(const std::string& name);  // cross-entropy
std::string to_string(LossKind kind);

// The SUM of per-sample losses of one batch (a 0-dim tensor that autograd can
// differentiate). Callers divide by the number of samples they average over: a pipeline
// micro-batch divides by its mini-batch's size, so micro-batch gradients add up to the
// mini-batch's.
using LossFn = std::function<at::Tensor(const at::Tensor& output, const at::Tensor& target)>;

LossFn make_loss(LossKind kind);

}  // namespace dtrain::models
