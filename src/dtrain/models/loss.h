// The training objective, a parameter of every engine (as torch.distributed.pipelining takes
// loss_fn) instead of a call spelled out in each of them.
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
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

// Two-class outputs ([B, 2] logits): counts of (label, prediction) at index
// 2 * label + prediction, what Matthews correlation needs; zeros for other outputs.
std::array<int64_t, 4> count_confusion(const at::Tensor& logits, const at::Tensor& labels);

// Matthews correlation of a two-class confusion matrix (count_confusion's layout); 0 when
// a row or column is empty, as scikit-learn defines it.
double matthews_correlation(const std::array<int64_t, 4>& confusion);

}  // namespace dtrain::models
