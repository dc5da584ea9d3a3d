// SyncBatchNorm on p ranks against torch's BatchNorm on the concatenated batch: outputs,
// input gradients, parameter gradients (summed over ranks), running statistics, eval mode.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <mutex>

#include "../support/ranks.h"
#include "dtrain/comm/group.h"
#include "dtrain/models/registry.h"
#include "dtrain/parallel/syncbn.h"

namespace dtrain::parallel {
namespace {

double max_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

struct Case {
  std::vector<int64_t> batches;  // per rank
  bool image;                    // [N, C, H, W] (else [N, C])
  bool affine;
};

void check(const Case& c) {
  const int world = static_cast<int>(c.batches.size());
  const int64_t channels = 6;
  at::Generator g = at::detail::createCPUGenerator(9);
  std::vector<at::Tensor> xs, gs;
  for (const int64_t b : c.batches) {
    const std::vector<int64_t> shape =
        c.image ? std::vector<int64_t>{b, channels, 5, 4} : std::vector<int64_t>{b, channels};
    xs.push_back(at::randn(shape, g) * 3 + 2);  // off-centre: tests the variance formula
    gs.push_back(at::randn(shape, g));          // d loss / d y
  }
  const at::Tensor weight = at::rand({channels}, g) + 0.5, bias = at::randn({channels}, g);

  // Reference: one BatchNorm over the concatenated batch, two training steps, then eval.
  torch::nn::BatchNorm2d ref2d(torch::nn::BatchNorm2dOptions(channels).affine(c.affine));
  torch::nn::BatchNorm1d ref1d(torch::nn::BatchNorm1dOptions(channels).affine(c.affine));
  torch::nn::Module& ref_module = c.image ? static_cast<torch::nn::Module&>(*ref2d) : *ref1d;
  auto ref_forward = [&](const at::Tensor& x) {
    return c.image ? ref2d->forward(x) : ref1d->forward(x);
  };
  if (c.affine) {
    torch::NoGradGuard no_grad;
    ref_module.named_parameters()["weight"].copy_(weight);
    ref_module.named_parameters()["bias"].copy_(bias);
  }
  const at::Tensor x_all = at::cat(xs).requires_grad_(true);
  const at::Tensor y_all = ref_forward(x_all);
  (y_all * at::cat(gs)).sum().backward();
  ref_forward(at::cat(xs) * 0.5);  // a second step for the running statistics
  ref_module.eval();
  const at::Tensor eval_x = at::randn(xs[0].sizes(), g);
  const at::Tensor eval_ref = ref_forward(eval_x).detach();

  std::mutex mu;
  testing::run_ranks(world, [&](comm::Group& group) {
    const auto r = static_cast<size_t>(group.rank());
    SyncBatchNormOptions o;
    o.num_features = channels;
    o.affine = c.affine;
    SyncBatchNorm bn(group, o);
    if (c.affine) {
      torch::NoGradGuard no_grad;
      bn->weight.copy_(weight);
      bn->bias.copy_(bias);
    }
    const at::Tensor x = xs[r].clone().requires_grad_(true);
    const at::Tensor y = bn->forward(x);
    (y * gs[r]).sum().backward();
    bn->forward(xs[r] * 0.5);
    int64_t offset = 0;
    for (size_t k = 0; k < r; ++k)
      offset += c.batches[k];
    const int64_t n = c.batches[r];
    std::vector<at::Tensor> param_grads;
    if (c.affine) {
      param_grads = {bn->weight.grad().clone(), bn->bias.grad().clone()};
      for (auto& pg : param_grads)
        group.native_all_reduce(pg, comm::ReduceOp::kSum);
    }
    bn->eval();
    const at::Tensor eval_y = bn->forward(eval_x).detach();
    std::lock_guard<std::mutex> lock(mu);
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_LE(max_diff(y, y_all.narrow(0, offset, n)), 1e-5);
    EXPECT_LE(max_diff(x.grad(), x_all.grad().narrow(0, offset, n)), 1e-5);
    if (c.affine) {
      EXPECT_LE(max_diff(param_grads[0], ref_module.named_parameters()["weight"].grad()), 1e-4);
      EXPECT_LE(max_diff(param_grads[1], ref_module.named_parameters()["bias"].grad()), 1e-4);
    }
    EXPECT_LE(max_diff(bn->running_mean, ref_module.named_buffers()["running_mean"]), 1e-5);
    EXPECT_LE(max_diff(bn->running_var, ref_module.named_buffers()["running_var"]), 1e-5);
    EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 2);
    EXPECT_LE(max_diff(eval_y, eval_ref), 1e-5);
  });
}

TEST(SyncBatchNorm, EqualsBatchNormOnTheConcatenatedBatch) {
  check({{4, 4}, true, true});
  check({{3, 5, 2}, true, true});      // unequal batches
  check({{8, 1, 3, 4}, false, true});  // 2-D input, a rank with one sample
  check({{5, 3}, true, false});        // non-affine
}

TEST(SyncBatchNorm, ConvertsEveryBatchNormOfTheZoo) {
  testing::run_ranks(1, [&](comm::Group& group) {
    for (const std::string name : {"resnet18", "mobilenetv2"}) {
      models::ModelConfig mc;
      mc.name = name;
      mc.in_channels = 1;
      mc.input_shape = {1, 28, 28};
      auto model = models::make_model(mc);
      int bns = 0;
      for (const auto& m : model->modules())
        bns += m->as<torch::nn::BatchNorm2dImpl>() != nullptr;
      const int64_t params_before = models::parameter_count(*model);
      EXPECT_EQ(convert_sync_batchnorm(*model, group), bns) << name;
      for (const auto& m : model->modules())
        EXPECT_EQ(m->as<torch::nn::BatchNorm2dImpl>(), nullptr) << name;
      EXPECT_EQ(models::parameter_count(*model), params_before);
      const at::Tensor out = model->forward(at::randn({2, 1, 28, 28}));
      EXPECT_EQ(out.sizes(), (std::vector<int64_t>{2, 10}));
    }
  });
}

}  // namespace
}  // namespace dtrain::parallel
