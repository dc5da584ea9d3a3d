// Internal to the trainer: one epoch of training steps, and evaluation, over any Engine.
#pragma once

#include <torch/optim/optimizer.h>

#include <functional>
#include <optional>
#include <utility>

#include "dtrain/data/loader.h"
#include "dtrain/metrics/progress.h"
#include "dtrain/metrics/timer.h"
#include "dtrain/train/checkpoint.h"
#include "dtrain/train/config.h"
#include "dtrain/train/engine.h"
#include "dtrain/train/epoch_stats.h"

namespace dtrain::train {

// After an optimizer step inside an epoch: where the loop stands (a checkpoint of it
// resumes exactly), how many optimizer steps of the epoch are done, and whether it was the
// epoch's last.
struct StepPoint {
  Position at;
  int64_t optimizer_steps = 0;
  bool last = false;
};

struct EpochInputs {
  const TrainConfig& config;
  const data::Dataset& train_set;
  const data::Normalization& norm;
  data::Augment augment;
  // Called after every optimizer step; returning false stops the run there.
  std::function<bool(const StepPoint&)> after_step;
  // Where the step log's elapsed_s counts from.
  metrics::Clock::time_point run_start = metrics::Clock::now();
};

// Trains epoch `from.epoch` (0-based) on this rank's shard from mini-batch `from.step` on
// (a resumed part-done epoch: the data order and augmentation are those of a whole run):
// learning rate per step, gradient accumulation, optimizer steps, divergence check,
// progress line. Returns the epoch's stats with the losses and accuracies summed over the
// ranks that hold data; nullopt when after_step stopped the run.
std::optional<EpochStats> train_epoch(const EpochInputs& in, Engine& engine,
                                      torch::optim::Optimizer& optimizer, const Position& from,
                                      metrics::ProgressLine& progress);

struct Evaluation {
  double loss = 0, accuracy = 0;
  double matthews = 0;  // two-class tasks
};

// Mean loss, accuracy and Matthews correlation over a dataset. Data-parallel ranks evaluate
// contiguous shares of it and sum.
Evaluation evaluate(Engine& engine, const data::Dataset& d, const data::Normalization& norm,
                    int64_t batch_size);

}  // namespace dtrain::train
