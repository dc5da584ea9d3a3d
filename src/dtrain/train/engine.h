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

namespace dtrain::comm {
class Group;
}

namespace dtrain::train {

struct BatchResult {
  double loss_sum = 0;  // sum of per-sample losses
  int64_t correct = 0;
  int64_t samples = 0;
};

// How one mini-batch takes part in an optimizer step (gradient accumulation).
struct StepPlan {
  bool sync = true;         // last micro-step of the step: communicate gradients
  double loss_scale = 1.0;  // this batch's share of the step's samples
};

class Engine {
 public:
  virtual ~Engine() = default;
  // This rank's data shard (DDP: every rank trains on its own shard).
  virtual int rank() const { return 0; }
  virtual int world() const { return 1; }
  // Sums `values` over the ranks that hold data (in place).
  virtual void sum_over_ranks(std::vector<double>& /*values*/) {}
  // Parameters this rank's optimizer updates.
  virtual std::vector<at::Tensor> parameters() = 0;
  // Forward and backward of one mini-batch (loss = mean over it); gradients are left in
  // parameters(). Adds its compute and communication time to `stats`.
  virtual BatchResult train_batch(const data::Batch& batch, double lr, const StepPlan& plan,
                                  EpochStats& stats) = 0;
  virtual BatchResult eval_batch(const at::Tensor& inputs, const at::Tensor& labels) = 0;
  // After an epoch's training steps, before evaluation: mode-specific reports.
  virtual void end_epoch(EpochStats& /*stats*/) {}
  // After the last epoch.
  virtual void finish() {}
  // What a checkpoint saves on this rank.
  virtual torch::nn::Sequential& checkpoint_module() = 0;
};

// Loss sum and correct predictions of one batch from its logits and mean loss.
BatchResult score(const at::Tensor& logits, const at::Tensor& labels, const at::Tensor& loss);
// The whole model on one batch in eval mode, without gradients.
BatchResult evaluate_batch(torch::nn::Sequential& model, const at::Tensor& inputs,
                           const at::Tensor& labels);

std::unique_ptr<Engine> make_local_engine(torch::nn::Sequential model);
std::unique_ptr<Engine> make_pipeline_engine(parallel::pipeline::Pipeline& pipeline);
// Data parallel: converts BatchNorms to SyncBatchNorm when asked, then wraps the model.
std::unique_ptr<Engine> make_ddp_engine(comm::Group& group, torch::nn::Sequential model,
                                        const TrainConfig& config);

}  // namespace dtrain::train
