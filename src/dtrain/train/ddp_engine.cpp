// Data-parallel mode: the whole model on every rank, gradients averaged by
// parallel::DistributedDataParallel, optional SyncBatchNorm.
#include <torch/torch.h>

#include <chrono>

#include "dtrain/base/device.h"
#include "dtrain/comm/group.h"
#include "dtrain/metrics/cuda_memory.h"
#include "dtrain/metrics/keys.h"
#include "dtrain/metrics/memory.h"
#include "dtrain/metrics/timer.h"
#include "dtrain/metrics/trace.h"
#include "dtrain/models/batch_context.h"
#include "dtrain/parallel/ddp.h"
#include "dtrain/parallel/ddp_codec_tuner.h"
#include "dtrain/parallel/syncbn.h"
#include "dtrain/train/engine.h"

namespace dtrain::train {
namespace {

using metrics::Clock;
using metrics::since;

class DdpEngine final : public Engine {
 public:
  DdpEngine(comm::Group& group, torch::nn::Sequential model, const TrainConfig& c)
      : group_(group),
        model_(std::move(model)),
        loss_(models::make_loss(c.loss)),
        device_(c.device) {
    const auto& o = c.parallel.ddp;
    parallel::DdpConfig dc;
    dc.bucket_mb = o.bucket_mb;
    dc.algorithm = o.algorithm;
    dc.gradient_codec = o.gradient_codec;
    if (o.auto_compress) {
      tuner_ = std::make_unique<parallel::DdpCodecTuner>(group, *o.auto_compress);
      dc.gradient_codec = tuner_->candidates().back();  // until the first decision
      dc.codec_may_change = true;
    }
    if (o.sync_bn) {
      if (parallel::convert_sync_batchnorm(*model_, group) == 0)
        throw std::invalid_argument("--sync-bn: model '" + c.model.name + "' has no BatchNorm");
      dc.broadcast_buffers = false;  // statistics are global, hence identical on every rank
    }
    // After the SyncBatchNorm swap, whose new modules start on the CPU.
    models::place(*model_, device_, c.memory_format);
    ddp_ = std::make_unique<parallel::DistributedDataParallel>(group, model_.ptr(), dc);
    // Lossy steps owe what their codec dropped: a resumed run owes it too.
    residuals_.save = [this] { return ddp_->residuals(); };
    residuals_.check = [this](const auto& saved) { ddp_->check_residuals(saved); };
    residuals_.restore = [this](const auto& saved) { ddp_->restore_residuals(saved); };
  }

  c10::Device input_device() const override { return device_; }
  int rank() const override { return group_.rank(); }
  int world() const override { return group_.size(); }

  void sum_over_ranks(std::vector<double>& values) override { sum_over_group(group_, values); }

  std::vector<at::Tensor> parameters() override { return model_->parameters(); }

  BatchResult train_batch(const data::Batch& batch, double, const StepPlan& plan,
                          EpochStats& s) override {
    model_->train();
    if (tuner_ && plan.sync) ddp_->set_gradient_codec(tuner_->codec_for_next_step());
    auto t = Clock::now();
    const auto step_start = t;
    ddp_->before_forward();
    const models::AttentionMaskScope scope(batch.mask);
    const at::Tensor logits = model_->forward(batch.inputs);
    const at::Tensor loss = mean_loss(loss_, logits, batch.labels);
    synchronize(device_);
    const double forward_s = metrics::trace::span_since("compute", "forward", t);
    t = Clock::now();
    ddp_->set_sync(plan.sync);
    (plan.loss_scale == 1.0 ? loss : loss * plan.loss_scale).backward();
    synchronize(device_);
    const double backward_s = metrics::trace::span_since("compute", "backward", t);
    t = Clock::now();
    {
      const metrics::trace::Span wait("communication", "wait for gradients");
      ddp_->finish_backward();
    }
    if (tuner_ && plan.sync) {
      tuner_->record_step(since(step_start), batch.labels.size(0));
      // At the second synchronized step of an epoch: the first may carry warm-up.
      if (++synced_in_epoch_ == 2) calibrate(forward_s + backward_s);
    }
    s.time_forward_s += forward_s;
    s.time_backward_s += backward_s;
    s.time_comm_s += since(t);
    return score(logits, batch.labels, loss);
  }

  BatchResult eval_batch(const data::Batch& batch) override {
    return evaluate_batch(model_, loss_, batch);
  }

  void end_epoch(EpochStats& s) override {
    const parallel::DdpStats d = ddp_->take_stats();
    s.time_comm_s += d.broadcast_s;
    namespace key = metrics::key;
    s.extra[key::kCommTotalS] = d.comm_s;
    s.extra[key::kCommExposedS] = d.exposed_s;
    s.extra[key::kCommHiddenFraction] = d.hidden_fraction();
    s.extra[key::kGradBytes] = d.grad_bytes;
    s.extra[key::kGradWireBytes] = d.wire_bytes;
    s.extra[key::kBuckets] = static_cast<int64_t>(ddp_->bucket_sizes().size());
    s.extra[key::kArmedBuckets] = static_cast<int64_t>(ddp_->armed_buckets());
    if (tuner_) {
      tuner_->end_epoch();
      s.extra[key::kAutoLinks] = tuner_->rows();
      synced_in_epoch_ = 0;
    }
    // The largest rank's memory, host and (on GPUs) device, beside rank 0's own.
    const metrics::CudaMemory gpu = metrics::cuda_memory(device_);
    auto most = at::tensor(
        {static_cast<double>(metrics::peak_rss_bytes()),
         static_cast<double>(gpu.max_allocated_bytes), static_cast<double>(gpu.max_reserved_bytes)},
        at::kDouble);
    group_.native_all_reduce(most, comm::ReduceOp::kMax);
    s.extra[key::kPeakRssMaxBytes] = static_cast<int64_t>(most[0].item<double>());
    if (device_.is_cuda()) {
      s.extra[key::kCudaMaxAllocatedMaxBytes] = static_cast<int64_t>(most[1].item<double>());
      s.extra[key::kCudaMaxReservedMaxBytes] = static_cast<int64_t>(most[2].item<double>());
    }
  }

  torch::nn::Sequential& checkpoint_module() override { return model_; }
  const ExtraState* checkpoint_extra() const override { return &residuals_; }
  bool replicated() const override { return true; }

  std::string layout() const override {
    return "DDP over " + std::to_string(group_.size()) + " ranks";
  }

 private:
  // --compress-grad auto, after a synchronized backward: this step's averaged gradients are
  // the sample the candidates are timed on. Per bucket and rank, the coded exchange sends
  // p-1 pieces and p-1 copies of its owned sum.
  void calibrate(double compute_s) {
    std::vector<at::Tensor> grads;
    for (const auto& p : model_->parameters())
      if (p.grad().defined()) grads.push_back(p.grad().reshape({-1}));
    const double messages =
        2.0 * (group_.size() - 1) * static_cast<double>(ddp_->bucket_sizes().size());
    tuner_->calibrate(at::cat(grads), compute_s, messages);
  }

  comm::Group& group_;
  torch::nn::Sequential model_;
  models::LossFn loss_;
  std::unique_ptr<parallel::DistributedDataParallel> ddp_;
  ExtraState residuals_;  // ddp_'s error-feedback residuals, for checkpoints
  std::unique_ptr<parallel::DdpCodecTuner> tuner_;
  c10::Device device_;
  int synced_in_epoch_ = 0;  // synchronized steps so far in this epoch
};

}  // namespace

std::unique_ptr<Engine> make_ddp_engine(comm::Group& group, torch::nn::Sequential model,
                                        const TrainConfig& config) {
  return std::make_unique<DdpEngine>(group, std::move(model), config);
}

}  // namespace dtrain::train
