// SyncBatchNorm: batch normalization whose statistics cover the whole global batch, i.e.
// every rank's samples, as if one process saw the concatenated batch.
//
// Forward (training): per channel, the local sum, sum of squares and count go into ONE
// all-reduce of 2C+1 float64 values (not the activations), so ranks may hold different
// batch sizes. Backward: one all-reduce of 2C values (sum of dy and of dy * x_hat) gives
// the exact input gradient of the global normalization. Parameter gradients are this
// rank's share (DDP averages them like any other gradient). Running mean and unbiased
// running variance follow PyTorch's momentum convention; eval mode uses them and does not
// communicate. Every rank must call forward (and backward) the same number of times.
#pragma once

#include <torch/nn/cloneable.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

namespace dtrain::comm {
class Group;
}

namespace dtrain::parallel {

struct SyncBatchNormOptions {
  int64_t num_features = 0;
  double eps = 1e-5;
  double momentum = 0.1;
  bool affine = true;
};

class SyncBatchNormImpl : public torch::nn::Cloneable<SyncBatchNormImpl> {
 public:
  SyncBatchNormImpl(comm::Group& group, SyncBatchNormOptions options);
  void reset() override;
  at::Tensor forward(const at::Tensor& input);

  SyncBatchNormOptions options;
  at::Tensor weight, bias;  // undefined when !affine
  at::Tensor running_mean, running_var, num_batches_tracked;

 private:
  comm::Group* group_;
};
TORCH_MODULE(SyncBatchNorm);

// Replaces every BatchNorm1d/2d held by a Sequential anywhere in `model` with a
// SyncBatchNorm carrying over its parameters and running statistics; returns how many.
// Throws std::invalid_argument if a BatchNorm is held elsewhere (it could not be swapped).
int convert_sync_batchnorm(torch::nn::Module& model, comm::Group& group);

}  // namespace dtrain::parallel
