#include "dtrain/train/optimizer.h"

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <cmath>

namespace dtrain::train {

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimConfig& o,
                                                        const std::vector<at::Tensor>& params) {
  switch (o.kind) {
    case OptimizerKind::kSgd:
      return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(o.lr)
                                                             .momentum(o.momentum)
                                                             .weight_decay(o.weight_decay)
                                                             .nesterov(o.nesterov));
    case OptimizerKind::kAdam:
      return std::make_unique<torch::optim::Adam>(
          params, torch::optim::AdamOptions(o.lr).weight_decay(o.weight_decay));
    case OptimizerKind::kAdamW:  // decoupled weight decay (Loshchilov and Hutter), as RoBERTa's
      return std::make_unique<torch::optim::AdamW>(
          params, torch::optim::AdamWOptions(o.lr).weight_decay(o.weight_decay));
  }
  throw std::invalid_argument("unknown optimizer");
}

double learning_rate(const OptimConfig& o, double epoch, int64_t total_epochs) {
  if (o.warmup_epochs > 0 && epoch < o.warmup_epochs)
    return o.lr * (epoch + 1e-9) / o.warmup_epochs;
  const double after = epoch - o.warmup_epochs;
  const double span = std::max(1e-9, static_cast<double>(total_epochs) - o.warmup_epochs);
  switch (o.schedule) {
    case LrSchedule::kStep:
      return o.lr * std::pow(o.gamma, std::floor(after / std::max<int64_t>(1, o.step_size)));
    case LrSchedule::kCosine:
      return o.lr * 0.5 * (1 + std::cos(M_PI * std::min(1.0, after / span)));
    case LrSchedule::kLinear:  // to zero at the end, as transformers' linear schedule
      return o.lr * std::max(0.0, 1.0 - after / span);
    case LrSchedule::kConstant:
      break;
  }
  return o.lr;
}

void set_learning_rate(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups())
    group.options().set_lr(lr);
}

}  // namespace dtrain::train
