// Internal to the trainer: one epoch of training steps, and evaluation, over any Engine.
#pragma once

#include <torch/optim/optimizer.h>

#include <utility>

#include "dtrain/data/loader.h"
#include "dtrain/metrics/progress.h"
#include "dtrain/train/config.h"
#include "dtrain/train/engine.h"
#include "dtrain/train/epoch_stats.h"

namespace dtrain::train {

struct EpochInputs {
  const TrainConfig& config;
  const data::Dataset& train_set;
  const data::Normalization& norm;
  data::Augment augment;
};

// Trains one epoch (0-based `epoch`) on this rank's shard: learning rate per step,
// gradient accumulation, optimizer steps, divergence check, progress line. Returns the
// epoch's stats with the losses and accuracies summed over the ranks that hold data.
EpochStats train_epoch(const EpochInputs& in, Engine& engine, torch::optim::Optimizer& optimizer,
                       int64_t epoch, metrics::ProgressLine& progress);

struct Evaluation {
  double loss = 0, accuracy = 0;
  double matthews = 0;  // two-class tasks
};

// Mean loss, accuracy and Matthews correlation over a dataset. Data-parallel ranks evaluate
// contiguous shares of it and sum.
Evaluation evaluate(Engine& engine, const data::Dataset& d, const data::Normalization& norm,
                    int64_t batch_size);

}  // namespace dtrain::train
