// Internal to the trainer: what the epoch loop needs from a parallelism mode. The loop owns
// data, learning rate, optimizer, metrics and checkpoints; an Engine owns forward,
// backward and whatever communication the mode needs.
#pragma once

#include <torch/nn/modules/container/sequential.h>

#include <memory>
#include <vector>

#include "dtrain/data/loader.h"
#include "dtrain/train/trainer.h"

namespace dtrain::parallel::pipeline {
class Pipeline;
}

namespace dtrain::train {

struct BatchResult {
  double loss_sum = 0;  // sum of per-sample losses
  int64_t correct = 0;
  int64_t samples = 0;
};

class Engine {
 public:
  virtual ~Engine() = default;
  // Parameters this rank's optimizer updates.
  virtual std::vector<at::Tensor> parameters() = 0;
  // Forward and backward of one mini-batch (loss = mean over it); gradients are left in
  // parameters(). Adds its compute and communication time to `stats`.
  virtual BatchResult train_batch(const data::Batch& batch, double lr, EpochStats& stats) = 0;
  virtual BatchResult eval_batch(const at::Tensor& inputs, const at::Tensor& labels) = 0;
  // After an epoch's training steps, before evaluation: mode-specific reports.
  virtual void end_epoch(EpochStats& /*stats*/) {}
  // After the last epoch.
  virtual void finish() {}
  // What a checkpoint saves on this rank.
  virtual torch::nn::Sequential& checkpoint_module() = 0;
};

std::unique_ptr<Engine> make_local_engine(torch::nn::Sequential model);
std::unique_ptr<Engine> make_pipeline_engine(parallel::pipeline::Pipeline& pipeline);

}  // namespace dtrain::train
