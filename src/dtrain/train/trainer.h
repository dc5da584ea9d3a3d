// One training loop for a single process and for pipeline parallelism: epochs of
// mini-batches with timing split into data wait, forward, backward, optimizer and
// communication, evaluation after each epoch, JSON-lines metrics and atomic checkpoints.
//
// Pipeline mode (parallel.mode == "pipeline"): rank 0 loads the data and drives; the other
// ranks receive the input shape from it, build the same model from the same seed, keep
// their blocks and follow rank 0's commands. Rank 0 returns the epochs' stats (with the
// per-stage and per-link report in EpochStats::extra); the others return nothing.
//
// DDP mode (parallel.mode == "ddp"): every rank trains on its shard of each epoch
// (batch_size per rank) and evaluates its share of the test set; losses and accuracies
// are summed over ranks, so every rank returns the same global stats. Rank 0 alone writes
// metrics and checkpoints.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "dtrain/data/dataset.h"
#include "dtrain/metrics/report.h"
#include "dtrain/models/registry.h"

namespace dtrain::comm {
class Group;
}

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

struct PipelineOptions {
  std::string placement = "linear";  // linear | ushape
  std::vector<int64_t> balance;      // blocks per stage (per server for ushape); empty: weights
  bool balance_auto = false;         // weights = measured forward+backward time per block
  int64_t client_first = 1, client_last = 1;
  std::string schedule = "gpipe";  // gpipe | 1f1b
  int chunks = 4;
  std::string compress = "none";
  std::string compress_grad;              // empty: same as compress
  std::string compress_edges = "client";  // client | all
};

struct DdpOptions {
  double bucket_mb = 25;
  std::string algo = "auto";  // ring | butterfly | direct | native | auto
  std::string compress_grad = "none";
  bool sync_bn = false;
};

struct ParallelConfig {
  std::string mode = "none";  // none | pipeline | ddp
  PipelineOptions pipeline;
  DdpOptions ddp;
};

struct TrainConfig {
  models::ModelConfig model;
  data::DataConfig data;
  OptimConfig optim;
  int64_t epochs = 1;
  int64_t batch_size = 64;       // per rank in DDP mode
  int64_t grad_accum_steps = 1;  // batches per optimizer step (DDP: communicate on the last)
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
  ParallelConfig parallel;
};

struct EpochStats {
  int64_t epoch = 0;
  double train_loss = 0, train_acc = 0, test_loss = 0, test_acc = 0;
  double samples_per_s = 0, epoch_s = 0;
  double time_data_s = 0, time_forward_s = 0, time_backward_s = 0, time_optimizer_s = 0,
         time_comm_s = 0;
  double lr = 0;
  int64_t peak_rss_bytes = 0;
  metrics::Row extra;  // mode-specific keys (pipeline: stages, links, bubble, ratio)
  metrics::Row to_row() const;
};

// Validates the config (throws std::invalid_argument), loads the data, builds the model and
// trains; returns the stats of the epochs it ran (after a resume, only the new ones).
// `group` is required for pipeline mode (every rank of it calls train).
std::vector<EpochStats> train(const TrainConfig& config, comm::Group* group = nullptr);

// The summary table for people.
std::vector<metrics::Column> epoch_columns(bool pipeline = false);
// Pipeline reports of one epoch as rows: one per rank (time split) and one per link.
std::vector<metrics::Row> stage_rows(const EpochStats& stats);
std::vector<metrics::Column> stage_columns();
std::vector<metrics::Row> link_rows(const EpochStats& stats);
std::vector<metrics::Column> link_columns();

}  // namespace dtrain::train
