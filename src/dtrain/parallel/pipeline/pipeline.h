// The pipeline stage runtime: one object per rank that runs its stages' blocks over
// micro-batches in the order a Schedule gives, with activations and gradients crossing
// ranks as codec packets over tagged point-to-point messages of one comm::Group.
//
// Roles. Rank 0 drives: it holds the data, splits each mini-batch into micro-batches,
// tells the other ranks (followers) what to do with a small command message, and collects
// results and reports. Followers loop on next_command()/execute(). Optimizers stay with
// the caller: each rank zeroes, then steps, its own parameters around a training command.
//
// Semantics. The loss (config.loss, the sum over a micro-batch) is averaged over the
// mini-batch: each micro-batch contributes loss/B, so gradients accumulated over micro-batches
// equal single-process gradients on the whole batch. BatchNorm sees micro-batch statistics (like
// torchgpipe without deferred batch norm): training equals single-process training that runs the
// micro-batches one after another and accumulates gradients, with M running-statistics
// updates per step.
//
// Compression. The sender computes with exact values; only the wire is lossy (see
// transport.h for which edges are compressed). With the U-shape placement, rank 0 never
// sends raw inputs or labels.
//
// Files: partition.h (which blocks where), schedule.h (the order of forward and backward
// ops), command.h (the driver/follower protocol), transport.h (messages, codecs, counters),
// report.h (what ranks measured), block_times.h (--balance auto's weights), delta_cache.h
// (delta coding's caches), this file (running a schedule on this rank's stages).
//
// Errors. Every rank checks at construction that all ranks agree on the configuration
// (an all-reduce of a fingerprint), so mismatched flags fail on every rank instead of
// hanging. A dead peer surfaces as comm::CommError from the blocking receive.
#pragma once

#include <torch/nn/modules/container/sequential.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "dtrain/models/loss.h"
#include "dtrain/models/memory_format.h"
#include "dtrain/parallel/auto_codec.h"
#include "dtrain/parallel/pipeline/command.h"
#include "dtrain/parallel/pipeline/delta_cache.h"
#include "dtrain/parallel/pipeline/link_tuner.h"
#include "dtrain/parallel/pipeline/partition.h"
#include "dtrain/parallel/pipeline/report.h"
#include "dtrain/parallel/pipeline/schedule.h"
#include "dtrain/parallel/pipeline/step_result.h"
#include "dtrain/parallel/pipeline/transport.h"

namespace dtrain::comm {
class Group;
}

namespace dtrain::parallel::pipeline {

struct PipelineConfig {
  Partition partition;
  std::string schedule = "gpipe";  // a row of the schedule table (schedule.h)
  int micro_batches = 4;
  EdgeCodecs codecs;  // default: none on every edge
  // --compress auto: codecs of compressed edges chosen per link and epoch (link_tuner.h).
  std::optional<AutoCompress> auto_compress;
  // This rank's device: its blocks and their tensors live there; the wire is host memory
  // (packets), so ranks may differ (a CPU client with GPU servers).
  c10::Device device{c10::kCPU};
  // The layout of this rank's blocks (models/memory_format.h); packets read them
  // contiguously.
  models::MemoryFormat memory_format = models::MemoryFormat::kAuto;
  models::LossFn loss = models::make_loss(models::LossKind::kCrossEntropy);
  // Text batches: the length T of their attention masks ([B, T]), which the driver sends
  // to every rank that runs a forward (models/batch_context.h); 0: batches have none.
  int64_t mask_length = 0;
  // Delta coding of activations (delta_cache.h); not with auto_compress.
  std::optional<DeltaOptions> delta;
};

class Pipeline {
 public:
  // `model` is the whole model, identical on every rank (same seed); this rank keeps the
  // blocks of its stages. Collective over the group: every rank must construct it.
  Pipeline(comm::Group& group, torch::nn::Sequential model, PipelineConfig config);
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  bool is_driver() const;
  // Parameters of this rank's blocks, for its optimizer.
  std::vector<at::Tensor> parameters() const;
  // This rank's blocks, for checkpoints and inspection.
  const std::vector<torch::nn::Sequential>& stage_modules() const { return modules_; }
  const PipelineConfig& config() const { return config_; }
  const c10::Device& device() const { return config_.device; }
  int micro_batches_for(int64_t batch) const;

  // Driver only. One mini-batch through the pipeline; training accumulates gradients into
  // every rank's parameters (the followers' callers step their optimizers with `lr`).
  // `mask`: the batch's attention mask when config().mask_length > 0, else undefined.
  // `ids`: each sample's index in the training set (int64 [batch]), needed with delta coding.
  StepResult train_batch(const at::Tensor& inputs, const at::Tensor& labels, const at::Tensor& mask,
                         double lr, const at::Tensor& ids = {});
  StepResult eval_batch(const at::Tensor& inputs, const at::Tensor& labels, const at::Tensor& mask);
  // Every rank's counters since the last call (rank order); resets them.
  std::vector<RankReport> collect_reports();
  // --compress auto: the last choice per link (metrics::key::kAutoLinks rows).
  std::vector<metrics::Row> auto_rows() const;
  // Tells the followers to save their checkpoint shards of position (epoch, step); the
  // caller then saves its own (train/checkpointer.h, collective over the group).
  void announce_checkpoint(int64_t epoch, int64_t step);
  // Turns the wire check (comm/group.h) off or on for every rank's messages from here on,
  // between two steps (a command to every follower, then this rank); a no-op when it already
  // is. For measuring its cost inside one run (metrics/alternating_cost.h).
  void set_wire_check(bool on);
  // Releases the followers from their command loop.
  void stop();
  // What a checkpoint's layout must match: the world size and every stage's blocks and rank.
  std::string layout() const;

  // Delta coding: this rank's caches by boundary (the receiving stage), for tests.
  const std::map<int, DeltaCache>& delta_caches() const { return delta_caches_; }

  // Followers only.
  Command next_command();
  void execute(const Command& command);

 private:
  struct Step;  // one mini-batch in flight: its micro-batches, live activations, result
  struct Live;
  StepResult run(bool training, int64_t batch, const at::Tensor& inputs, const at::Tensor& labels,
                 const at::Tensor& mask, const at::Tensor& ids);
  void route_driver_data(Step& step);
  void check_mask(int64_t batch, const at::Tensor& mask) const;
  at::Tensor mask_of(Step& step, int micro_batch);
  std::optional<Transfer> input_of(const Step& step, const Op& op) const;
  // Delta coding (pipeline_delta.cpp).
  void make_delta_caches(torch::nn::Sequential& model);
  void check_ids(int64_t batch, const at::Tensor& ids) const;
  at::Tensor share_ids(const Step& step, const at::Tensor& ids);
  bool delta_coded(const Transfer& transfer) const;
  const compress::Codec* codec_override(const Step& step, const Transfer& transfer) const;
  void send_activation(Step& step, const at::Tensor& output, const Transfer& transfer);
  at::Tensor delta_received(Step& step, const Transfer& transfer, at::Tensor decoded);
  void post_receives(const Step& step, const std::vector<Op>& ops, size_t next);
  void post_driver_data(const Step& step);
  void forward(Step& step, const Op& op);
  void backward(Step& step, const Op& op);
  void gather_result(Step& step);
  size_t local_index(int stage) const;
  RankReport local_report() const;
  const Schedule& schedule_for(bool training, int micro_batches);
  void check_agreement(int64_t blocks, int64_t parameters);

  comm::Group& group_;
  PipelineConfig config_;
  std::vector<int> stage_rank_;
  std::vector<int> my_stages_;                  // virtual stage indices this rank runs
  std::vector<torch::nn::Sequential> modules_;  // parallel to my_stages_
  std::vector<std::string> block_names_;
  std::map<std::pair<bool, int>, Schedule> schedules_;
  std::unique_ptr<StageTransport> wire_;
  std::unique_ptr<LinkTuner> tuner_;
  bool calibrate_due_ = true;       // at the second training step of each epoch
  double last_step_compute_s_ = 0;  // forward + backward of this rank's last training step
  std::unique_ptr<compress::Codec> warmup_codec_;  // --delta
  std::map<int, DeltaCache> delta_caches_;
};

}  // namespace dtrain::parallel::pipeline
