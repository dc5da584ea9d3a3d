// The pipeline stage runtime: one object per rank that runs its stages' blocks over
// micro-batches in the order a Schedule gives, with activations and gradients crossing
// ranks as codec packets over tagged point-to-point messages of one comm::Group.
//
// Roles. Rank 0 drives: it holds the data, splits each mini-batch into micro-batches,
// tells the other ranks (followers) what to do with a small command message, and collects
// results and reports. Followers loop on next_command()/execute(). Optimizers stay with
// the caller: each rank zeroes, then steps, its own parameters around a training command.
//
// Semantics. The loss is the mean over the mini-batch: each micro-batch contributes
// sum(cross_entropy)/B, so gradients accumulated over micro-batches equal single-process
// gradients on the whole batch. BatchNorm sees micro-batch statistics (like torchgpipe
// without deferred batch norm): training equals single-process training that runs the
// micro-batches one after another and accumulates gradients, with M running-statistics
// updates per step.
//
// Compression. The sender computes with exact values; only the wire is lossy. Forward
// activations use the activation codec and backward gradients the gradient codec on the
// compressed edges (links touching rank 0, or every link); other edges carry "none".
// With the U-shape placement, rank 0 never sends raw inputs or labels.
//
// Errors. Every rank checks at construction that all ranks agree on the configuration
// (an all-reduce of a fingerprint), so mismatched flags fail on every rank instead of
// hanging. A dead peer surfaces as comm::CommError from the blocking receive.
#pragma once

#include <torch/nn/modules/container/sequential.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "dtrain/parallel/pipeline/partition.h"
#include "dtrain/parallel/pipeline/report.h"
#include "dtrain/parallel/pipeline/schedule.h"

namespace dtrain::comm {
class Group;
}
namespace dtrain::compress {
class Codec;
}

namespace dtrain::parallel::pipeline {

struct PipelineConfig {
  Partition partition;
  ScheduleKind schedule = ScheduleKind::kGPipe;
  int micro_batches = 4;
  std::string activation_codec = "none";
  std::string gradient_codec = "none";
  bool compress_all_edges = false;  // false: only links touching rank 0
};

struct StepResult {
  double loss_sum = 0;  // sum of per-sample losses
  int64_t correct = 0;
  int64_t samples = 0;
};

enum class CommandKind { kTrain = 1, kEval = 2, kReport = 3, kStop = 4 };

struct Command {
  CommandKind kind = CommandKind::kStop;
  int64_t batch = 0;
  double lr = 0;
};

class Pipeline {
 public:
  // `model` is the whole model, identical on every rank (same seed); this rank keeps the
  // blocks of its stages. Collective over the group: every rank must construct it.
  Pipeline(comm::Group& group, torch::nn::Sequential model, PipelineConfig config);
  ~Pipeline();
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  bool is_driver() const;
  // Parameters of this rank's blocks, for its optimizer.
  std::vector<at::Tensor> parameters() const;
  // This rank's blocks, for checkpoints and inspection.
  const std::vector<torch::nn::Sequential>& stage_modules() const { return modules_; }
  const PipelineConfig& config() const { return config_; }
  int micro_batches_for(int64_t batch) const;

  // Driver only. One mini-batch through the pipeline; training accumulates gradients into
  // every rank's parameters (the followers' callers step their optimizers with `lr`).
  StepResult train_batch(const at::Tensor& inputs, const at::Tensor& labels, double lr);
  StepResult eval_batch(const at::Tensor& inputs, const at::Tensor& labels);
  // Every rank's counters since the last call (rank order); resets them.
  std::vector<RankReport> collect_reports();
  // Releases the followers from their command loop.
  void stop();

  // Followers only.
  Command next_command();
  void execute(const Command& command);

 private:
  StepResult run(bool training, int64_t batch, const at::Tensor& inputs, const at::Tensor& labels);
  void send_command(const Command& command);
  void send_tensor(const at::Tensor& t, int from_stage, int to_stage, int micro_batch,
                   bool gradient);
  at::Tensor receive_tensor(int from_stage, int to_stage, int micro_batch, bool gradient);
  bool compressed_edge(int rank_a, int rank_b) const;
  RankReport local_report() const;
  void reset_counters();
  void wait_sends();
  const Schedule& schedule_for(bool training, int micro_batches);

  comm::Group& group_;
  PipelineConfig config_;
  std::vector<int> stage_rank_;
  std::vector<int> my_stages_;                  // virtual stage indices this rank runs
  std::vector<torch::nn::Sequential> modules_;  // parallel to my_stages_
  std::vector<std::string> block_names_;
  std::unique_ptr<compress::Codec> activation_codec_, gradient_codec_, plain_codec_;
  std::map<std::pair<bool, int>, Schedule> schedules_;

  struct Pending;
  std::vector<std::unique_ptr<Pending>> pending_;
  std::map<std::tuple<bool, int, int>, at::Tensor> local_handoff_;
  StageTimes times_;
  std::map<std::tuple<int, bool>, LinkRecord> links_;
  bool counting_ = false;  // training steps only
};

// Mean forward+backward seconds of each block of `model` on `input`, over `repeats`
// passes after one warm-up: the weights of --balance auto.
std::vector<double> measure_block_times(torch::nn::Sequential& model, const at::Tensor& input,
                                        int repeats);

}  // namespace dtrain::parallel::pipeline
