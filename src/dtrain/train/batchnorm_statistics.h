// BatchNorm statistics for averaged weights. Weights averaged across replicas (DiLoCo's
// outer step) and running statistics averaged across them do not match: each replica took
// its statistics under its own weights, and the averaged weights produce other activations.
// SWA (Izmailov et al., "Averaging Weights Leads to Wider Optima and Better
// Generalization", 2018) recomputes them after averaging; so does this: each rank keeps its
// last kBatches training inputs, and after an epoch's last outer step runs them through
// the shared weights in training mode with a cumulative average (BatchNorm's momentum
// unset), then the ranks average the statistics exactly.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/modules/container/sequential.h>

#include <cstddef>
#include <deque>
#include <map>
#include <string>

namespace dtrain::comm {
class Group;
}

namespace dtrain::train {

class BatchNormStatistics {
 public:
  static constexpr size_t kBatches = 8;

  // Nothing to do (and nothing kept) for a model without BatchNorm.
  explicit BatchNormStatistics(torch::nn::Sequential& model);
  bool active() const { return active_; }

  // A training batch's inputs (kept by reference: the loader makes each batch anew).
  void remember(const at::Tensor& inputs);
  // Recomputes the running statistics under the model's current weights from the batches
  // remembered, then averages them over `group` (collective; every rank calls it, one that
  // remembered none with the statistics it has).
  void recompute(comm::Group& group);

  // Checkpoints: the remembered inputs, so a resumed run recomputes from the same batches.
  std::map<std::string, at::Tensor> state() const;
  void restore(const std::map<std::string, at::Tensor>& saved);

 private:
  torch::nn::Sequential& model_;
  bool active_ = false;
  std::deque<at::Tensor> inputs_;
};

}  // namespace dtrain::train
