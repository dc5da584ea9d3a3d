// Single-process training (the model on this rank, no communication), and the helpers
// every engine shares: scoring, evaluation, sums over a group.
#include <torch/torch.h>

#include <chrono>

#include "dtrain/base/device.h"
#include "dtrain/comm/group.h"
#include "dtrain/metrics/timer.h"
#include "dtrain/metrics/trace.h"
#include "dtrain/models/batch_context.h"
#include "dtrain/train/engine.h"

namespace dtrain::train {
namespace {

using metrics::Clock;
using metrics::since;

}  // namespace

void sum_over_group(comm::Group& group, std::vector<double>& values) {
  auto t = at::tensor(values, at::kDouble);
  group.native_all_reduce(t, comm::ReduceOp::kSum);
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = t[static_cast<int64_t>(i)].item<double>();
}

BatchResult score(const at::Tensor& logits, const at::Tensor& labels, const at::Tensor& loss) {
  BatchResult r;
  r.samples = labels.size(0);
  r.loss_sum = loss.item<double>() * static_cast<double>(r.samples);
  r.correct = logits.argmax(1).eq(labels).sum().item<int64_t>();
  r.confusion = models::count_confusion(logits, labels);
  return r;
}

at::Tensor mean_loss(const models::LossFn& loss, const at::Tensor& logits,
                     const at::Tensor& labels) {
  return loss(logits, labels) / static_cast<double>(std::max<int64_t>(1, labels.size(0)));
}

BatchResult evaluate_batch(torch::nn::Sequential& model, const models::LossFn& loss,
                           const data::Batch& batch) {
  torch::NoGradGuard no_grad;
  model->eval();
  const models::AttentionMaskScope scope(batch.mask);
  const at::Tensor logits = model->forward(batch.inputs);
  return score(logits, batch.labels, mean_loss(loss, logits, batch.labels));
}

namespace {

class LocalEngine final : public Engine {
 public:
  LocalEngine(torch::nn::Sequential model, models::LossFn loss, c10::Device device,
              models::MemoryFormat format)
      : model_(std::move(model)), loss_(std::move(loss)), device_(device) {
    models::place(*model_, device_, format);
  }

  c10::Device input_device() const override { return device_; }

  std::vector<at::Tensor> parameters() override { return model_->parameters(); }

  BatchResult train_batch(const data::Batch& batch, double, const StepPlan& plan,
                          EpochStats& s) override {
    model_->train();
    auto t = Clock::now();
    const models::AttentionMaskScope scope(batch.mask);
    const at::Tensor logits = model_->forward(batch.inputs);
    const at::Tensor loss = mean_loss(loss_, logits, batch.labels);
    synchronize(device_);
    s.time_forward_s += metrics::trace::span_since("compute", "forward", t);
    t = Clock::now();
    (plan.loss_scale == 1.0 ? loss : loss * plan.loss_scale).backward();
    synchronize(device_);
    s.time_backward_s += metrics::trace::span_since("compute", "backward", t);
    return score(logits, batch.labels, loss);
  }

  BatchResult eval_batch(const data::Batch& batch) override {
    return evaluate_batch(model_, loss_, batch);
  }

  torch::nn::Sequential& checkpoint_module() override { return model_; }

 private:
  torch::nn::Sequential model_;
  models::LossFn loss_;
  c10::Device device_;
};

}  // namespace

std::unique_ptr<Engine> make_local_engine(torch::nn::Sequential model, models::LossFn loss,
                                          c10::Device device, models::MemoryFormat format) {
  return std::make_unique<LocalEngine>(std::move(model), std::move(loss), device, format);
}

}  // namespace dtrain::train
