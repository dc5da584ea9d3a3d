// Internal to the trainer: what the epoch loop needs from a parallelism mode. The loop owns
// data, learning rate, optimizer, metrics and checkpoints; an Engine owns forward,
// backward and whatever communication the mode needs.
#pragma once

#include <torch/nn/modules/container/sequential.h>

#include <array>
#include <memory>
#include <vector>

#include "dtrain/data/loader.h"
#include "dtrain/models/loss.h"
#include "dtrain/train/checkpoint.h"
#include "dtrain/train/config.h"
#include "dtrain/train/epoch_stats.h"

namespace dtrain::comm {
class Group;
}

namespace dtrain::train {

struct BatchResult {
  double loss_sum = 0;  // sum of per-sample losses
  int64_t correct = 0;
  int64_t samples = 0;
  std::array<int64_t, 4> confusion{};  // two-class tasks (models::count_confusion)
};

// How one mini-batch takes part in an optimizer step (gradient accumulation).
struct StepPlan {
  bool sync = true;         // last micro-step of the step: communicate gradients
  double loss_scale = 1.0;  // this batch's share of the step's samples
  int64_t epoch_steps = 0;  // optimizer steps in this epoch
  int64_t epoch_step = 0;   // this optimizer step's index in the epoch
};

class Engine {
 public:
  virtual ~Engine() = default;
  // Where this rank's batches must be for train_batch and eval_batch.
  virtual c10::Device input_device() const { return c10::Device(c10::kCPU); }
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
  virtual BatchResult eval_batch(const data::Batch& batch) = 0;
  // After each optimizer step (DiLoCo's outer steps run here); `last_in_epoch`: the
  // epoch's last training step.
  virtual void after_optimizer_step(EpochStats& /*stats*/, bool /*last_in_epoch*/) {}
  // After an epoch's training steps, before evaluation: mode-specific reports.
  virtual void end_epoch(EpochStats& /*stats*/) {}
  // After the last epoch.
  virtual void finish() {}
  // What a checkpoint saves on this rank: the module, and the mode's own state if any.
  virtual torch::nn::Sequential& checkpoint_module() = 0;
  virtual const ExtraState* checkpoint_extra() const { return nullptr; }
  // Whether every rank's module and optimizer equal rank 0's (DDP): then only rank 0's
  // checkpoint shard holds them (train/checkpointer.h).
  virtual bool replicated() const { return false; }
  // What a checkpoint's layout must match to resume (train/checkpointer.h).
  virtual std::string layout() const { return "a single process"; }
  // Before this rank saves a checkpoint: ranks that do not run the loop (pipeline
  // followers) are told to save theirs.
  virtual void announce_checkpoint(const Position& /*at*/) {}
};

// Sums `values` over every rank of `group` in place (the data-parallel modes' sum_over_ranks).
void sum_over_group(comm::Group& group, std::vector<double>& values);

// Loss sum and correct predictions of one batch from its logits and mean loss.
BatchResult score(const at::Tensor& logits, const at::Tensor& labels, const at::Tensor& loss);
// The mean of `loss` over a batch.
at::Tensor mean_loss(const models::LossFn& loss, const at::Tensor& logits,
                     const at::Tensor& labels);
// The whole model on one batch in eval mode, without gradients.
BatchResult evaluate_batch(torch::nn::Sequential& model, const models::LossFn& loss,
                           const data::Batch& batch);

// The model on `device`, laid out as `format` says (models/memory_format.h); forward and
// backward times include waiting for the device.
std::unique_ptr<Engine> make_local_engine(torch::nn::Sequential model, models::LossFn loss,
                                          c10::Device device, models::MemoryFormat format);
// DiLoCo: every rank a replica training alone, averaged by outer steps (parallel/diloco.h).
std::unique_ptr<Engine> make_diloco_engine(comm::Group& group, torch::nn::Sequential model,
                                           const TrainConfig& config);
// Data parallel: converts BatchNorms to SyncBatchNorm when asked, then wraps the model.
std::unique_ptr<Engine> make_ddp_engine(comm::Group& group, torch::nn::Sequential model,
                                        const TrainConfig& config);

// What a pipeline-mode trainer needs to know before it builds the pipeline: rank 0 loaded
// the data (the others did not), and a sample batch for --balance auto.
struct PipelineSetup {
  const TrainConfig& config;
  const models::ModelConfig& model;  // completed from the data (input shape, classes)
  int64_t parameters;                // of the whole model (checkpoints)
  const data::Dataset* train_set;    // rank 0 only
  const data::Normalization& norm;
};
// Pipeline mode: builds this rank's stages of `model` (which it empties, so only those
// stay alive). On rank 0 returns the driving engine; on the other ranks restores their
// checkpoint shard (--resume), then runs rank 0's commands, stepping this rank's optimizer
// and saving its shard when told, until rank 0 stops, then returns nullptr.
std::unique_ptr<Engine> make_pipeline_engine(comm::Group& group, torch::nn::Sequential& model,
                                             const PipelineSetup& setup);

// Pipeline mode: rank 0 tells the others, which load no data, the model's input shape,
// class count and (text) vocabulary size and padding id (`failed`: rank 0 could not load
// the data, and every rank throws).
void share_model_shape(comm::Group& group, models::ModelConfig& model, bool failed);

}  // namespace dtrain::train
