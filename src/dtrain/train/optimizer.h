// Optimizers and learning-rate schedules from OptimConfig.
#pragma once

#include <torch/optim/optimizer.h>

#include <memory>
#include <vector>

#include "dtrain/train/config.h"

namespace dtrain::train {

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimConfig& config,
                                                        const std::vector<at::Tensor>& params);

// Learning rate at a fractional epoch (epoch + batch / batches): linear warm-up, then the
// schedule over the remaining epochs.
double learning_rate(const OptimConfig& o, double epoch, int64_t total_epochs);

void set_learning_rate(torch::optim::Optimizer& optimizer, double lr);

}  // namespace dtrain::train
