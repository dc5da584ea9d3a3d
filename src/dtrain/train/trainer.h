// One training loop: epochs of mini-batches with timing split into data wait, forward,
// backward, optimizer and communication (zero for a single process; DDP and the pipeline
// fill it), evaluation after each epoch, JSON-lines metrics and atomic checkpoints.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "dtrain/data/dataset.h"
#include "dtrain/metrics/report.h"
#include "dtrain/models/registry.h"

namespace dtrain::train {

struct OptimConfig {
  std::string name = "sgd";  // sgd | adam
  double lr = 0.05;
  double momentum = 0.9;
  double weight_decay = 5e-4;
  bool nesterov = false;
  std::string schedule = "cosine";  // constant | step | cosine
  double warmup_epochs = 0;
  int64_t step_size = 30;  // epochs between decays (step)
  double gamma = 0.1;
};

// Learning rate at a fractional epoch (epoch + batch / batches): linear warm-up, then the
// schedule over the remaining epochs.
double learning_rate(const OptimConfig& o, double epoch, int64_t total_epochs);

struct TrainConfig {
  models::ModelConfig model;
  data::DataConfig data;
  OptimConfig optim;
  int64_t epochs = 1;
  int64_t batch_size = 64;
  int64_t test_batch_size = 1000;
  uint64_t seed = 0;
  int64_t limit_train = 0;  // 0: all
  int64_t limit_test = 0;
  int64_t crop_padding = -1;  // -1: dataset default (4 for CIFAR-sized colour data, else 0)
  int flip = -1;              // -1: dataset default (off for digit-like data)
  std::string metrics_path;
  std::string checkpoint_dir;
  bool resume = false;
  int64_t stop_after = 0;  // run at most this many epochs now (0: to the end); resume later
  bool progress = true;
};

struct EpochStats {
  int64_t epoch = 0;
  double train_loss = 0, train_acc = 0, test_loss = 0, test_acc = 0;
  double samples_per_s = 0, epoch_s = 0;
  double time_data_s = 0, time_forward_s = 0, time_backward_s = 0, time_optimizer_s = 0,
         time_comm_s = 0;
  double lr = 0;
  int64_t peak_rss_bytes = 0;
  metrics::Row to_row() const;
};

// Validates the config (throws std::invalid_argument), loads the data, builds the model and
// trains; returns the stats of the epochs it ran (after a resume, only the new ones).
std::vector<EpochStats> train(const TrainConfig& config);

// The summary table for people.
std::vector<metrics::Column> epoch_columns();

}  // namespace dtrain::train
