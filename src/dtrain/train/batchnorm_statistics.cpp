#include "dtrain/train/batchnorm_statistics.h"

#include <torch/torch.h>

#include <optional>
#include <vector>

#include "dtrain/parallel/exact_mean.h"

namespace dtrain::train {
namespace {

const std::string kPrefix = "batchnorm_inputs/";

// Every BatchNorm of the model, whatever its dimension, as the calls this file needs.
struct Norm {
  std::function<void()> reset;
  std::function<std::optional<double>()> momentum;
  std::function<void(std::optional<double>)> set_momentum;
  std::vector<at::Tensor> statistics;  // running mean and variance
};

template <class Impl>
bool add_if(torch::nn::Module& m, std::vector<Norm>& out) {
  auto* bn = dynamic_cast<Impl*>(&m);
  if (bn == nullptr || !bn->options.track_running_stats()) return false;
  out.push_back({[bn] { bn->reset_running_stats(); },
                 [bn]() -> std::optional<double> { return bn->options.momentum(); },
                 [bn](std::optional<double> v) { bn->options.momentum(v); },
                 {bn->running_mean, bn->running_var}});
  return true;
}

std::vector<Norm> norms_of(torch::nn::Sequential& model) {
  std::vector<Norm> out;
  for (const auto& m : model->modules(/*include_self=*/false))
    add_if<torch::nn::BatchNorm1dImpl>(*m, out) || add_if<torch::nn::BatchNorm2dImpl>(*m, out) ||
        add_if<torch::nn::BatchNorm3dImpl>(*m, out);
  return out;
}

}  // namespace

BatchNormStatistics::BatchNormStatistics(torch::nn::Sequential& model)
    : model_(model), active_(!norms_of(model).empty()) {}

void BatchNormStatistics::remember(const at::Tensor& inputs) {
  if (!active_) return;
  inputs_.push_back(inputs);
  if (inputs_.size() > kBatches) inputs_.pop_front();
}

void BatchNormStatistics::recompute(comm::Group& group) {
  if (!active_) return;  // the same on every rank: the model's
  std::vector<Norm> norms = norms_of(model_);
  const torch::NoGradGuard no_grad;
  // A rank that kept no batch (an elastic replica that entered with nothing left to train)
  // still takes part in the mean below, with the statistics it has.
  if (!inputs_.empty()) {
    std::vector<std::optional<double>> momenta;
    for (auto& n : norms) {
      momenta.push_back(n.momentum());
      n.reset();
      n.set_momentum(std::nullopt);  // a cumulative average of the batches below
    }
    const bool was_training = model_->is_training();
    model_->train();
    for (const auto& x : inputs_)
      model_->forward(x);
    model_->train(was_training);
    for (size_t i = 0; i < norms.size(); ++i)
      norms[i].set_momentum(momenta[i]);
  }
  std::vector<at::Tensor> statistics;
  for (const auto& n : norms)
    statistics.insert(statistics.end(), n.statistics.begin(), n.statistics.end());
  parallel::exact_means(group, statistics);
}

std::map<std::string, at::Tensor> BatchNormStatistics::state() const {
  std::map<std::string, at::Tensor> out;
  for (size_t i = 0; i < inputs_.size(); ++i)
    out[kPrefix + std::to_string(i)] = inputs_[i].to(at::kCPU);
  return out;
}

void BatchNormStatistics::restore(const std::map<std::string, at::Tensor>& saved) {
  inputs_.clear();
  for (size_t i = 0; i < kBatches; ++i) {
    const auto it = saved.find(kPrefix + std::to_string(i));
    if (it == saved.end()) break;
    inputs_.push_back(it->second.to(model_->parameters().front().device()));
  }
}

}  // namespace dtrain::train
