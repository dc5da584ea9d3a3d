#include "dtrain/parallel/syncbn.h"

#include <torch/torch.h>

#include <optional>

#include "dtrain/comm/allreduce.h"
#include "dtrain/comm/group.h"

namespace dtrain::parallel {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

std::vector<int64_t> reduce_dims(const at::Tensor& x) {
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < x.dim(); ++d)
    dims.push_back(d);
  return dims;
}

std::vector<int64_t> channel_shape(const at::Tensor& x) {
  std::vector<int64_t> shape(static_cast<size_t>(x.dim()), 1);
  shape[1] = x.size(1);
  return shape;
}

// Its own tag: under DDP, gradient buckets are being all-reduced by the communication
// thread while backward (and so this) runs.
void sum_over_ranks(comm::Group& group, at::Tensor& t) {
  if (group.size() == 1) return;
  comm::AllReduceOptions o;
  o.tag = comm::collective_tag(comm::CollectiveChannel::kSyncBatchNorm);
  comm::all_reduce(group, t, o);
}

// y = (x - mean) * invstd * weight + bias with mean and variance over all ranks' samples.
// Memory: forward allocates only y (statistics by Welford, no squared copy); backward saves
// x itself and allocates one product for its reduction and dx, computed as
// A * dy + B * x + C per channel instead of through a materialized x_hat.
struct SyncBatchNormFunction : public torch::autograd::Function<SyncBatchNormFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias, comm::Group* group, double eps,
                            at::Tensor* batch_mean, at::Tensor* batch_var, int64_t* batch_count) {
    const auto dims = reduce_dims(x);
    const int64_t c = x.size(1);
    const double local_count = static_cast<double>(x.numel() / std::max<int64_t>(1, c));
    auto stats = at::zeros({2 * c + 1}, at::kDouble);
    if (local_count > 0) {
      const auto [var, mean] = at::var_mean(x, dims, /*unbiased=*/false);
      const at::Tensor mean_d = mean.to(at::kDouble);
      stats.narrow(0, 0, c).copy_(mean_d * local_count);
      stats.narrow(0, c, c).copy_((var.to(at::kDouble) + mean_d * mean_d) * local_count);
    }
    stats[2 * c] = local_count;
    sum_over_ranks(*group, stats);
    const double count = stats[2 * c].item<double>();
    if (count < 1) throw std::invalid_argument("SyncBatchNorm: no samples on any rank");
    // The sums crossed the ranks in host memory; the rest runs where x lives.
    const at::Tensor totals = stats.to(x.device());
    const at::Tensor mean = totals.narrow(0, 0, c) / count;
    const at::Tensor var = (totals.narrow(0, c, c) / count - mean * mean).clamp_min(0);
    const at::Tensor invstd = (var + eps).rsqrt();
    // Non-affine normalization passes empty weight and bias (autograd needs defined inputs).
    const bool affine = weight.numel() > 0;
    const at::Tensor scale = affine ? invstd * weight.to(at::kDouble) : invstd;
    const at::Tensor shift = (affine ? bias.to(at::kDouble) : at::zeros_like(mean)) - mean * scale;
    const auto shape = channel_shape(x);
    at::Tensor y =
        at::addcmul(shift.to(at::kFloat).view(shape), x, scale.to(at::kFloat).view(shape));
    *batch_mean = mean.to(at::kFloat);
    *batch_var = var.to(at::kFloat);
    *batch_count = static_cast<int64_t>(count);
    ctx->save_for_backward({x, weight});
    ctx->saved_data["mean"] = mean;
    ctx->saved_data["invstd"] = invstd;
    ctx->saved_data["group"] = reinterpret_cast<int64_t>(group);
    ctx->saved_data["count"] = count;
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& weight = saved[1];
    const at::Tensor mean = ctx->saved_data["mean"].toTensor();
    const at::Tensor invstd = ctx->saved_data["invstd"].toTensor();
    auto* group = reinterpret_cast<comm::Group*>(ctx->saved_data["group"].toInt());
    const double count = ctx->saved_data["count"].toDouble();
    const at::Tensor dy = grad_outputs[0].contiguous();
    const auto dims = reduce_dims(dy);
    const int64_t c = dy.size(1);
    const auto shape = channel_shape(dy);
    // Local sums of dy and dy * x_hat = invstd * (dy * x - mean * dy).
    auto sums = at::empty({2 * c}, at::kDouble);
    const at::Tensor sum_dy_local = dy.sum(dims, false, at::kDouble);
    sums.narrow(0, 0, c).copy_(sum_dy_local);
    sums.narrow(0, c, c).copy_(((dy * x).sum(dims, false, at::kDouble) - mean * sum_dy_local) *
                               invstd);
    // Parameter gradients are this rank's share: a copy, on x's device, before the sum.
    const at::Tensor local = sums.to(x.device(), sums.scalar_type(), false, /*copy=*/true);
    sum_over_ranks(*group, sums);
    const at::Tensor totals = sums.to(x.device());
    const at::Tensor sum_dy = totals.narrow(0, 0, c), sum_dy_xhat = totals.narrow(0, c, c);
    const bool affine = weight.numel() > 0;
    const at::Tensor a = affine ? invstd * weight.to(at::kDouble) : invstd;
    const at::Tensor b = -a * invstd * sum_dy_xhat / count;
    const at::Tensor c0 = -a * sum_dy / count - b * mean;
    at::Tensor dx = x * b.to(at::kFloat).view(shape);
    dx.addcmul_(dy, a.to(at::kFloat).view(shape)).add_(c0.to(at::kFloat).view(shape));
    at::Tensor dweight, dbias;
    if (affine) {
      dweight = local.narrow(0, c, c).to(at::kFloat);
      dbias = local.narrow(0, 0, c).to(at::kFloat);
    }
    return {dx,           dweight,      dbias,        at::Tensor(),
            at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

SyncBatchNormImpl::SyncBatchNormImpl(comm::Group& group, SyncBatchNormOptions o)
    : options(o), group_(&group) {
  reset();
}

void SyncBatchNormImpl::reset() {
  const int64_t c = options.num_features;
  if (c < 1) throw std::invalid_argument("SyncBatchNorm needs num_features >= 1");
  if (options.affine) {
    weight = register_parameter("weight", torch::ones({c}));
    bias = register_parameter("bias", torch::zeros({c}));
  }
  running_mean = register_buffer("running_mean", torch::zeros({c}));
  running_var = register_buffer("running_var", torch::ones({c}));
  num_batches_tracked = register_buffer("num_batches_tracked", torch::zeros({}, torch::kLong));
}

at::Tensor SyncBatchNormImpl::forward(const at::Tensor& input) {
  if (input.dim() < 2 || input.size(1) != options.num_features)
    throw std::invalid_argument("SyncBatchNorm(" + std::to_string(options.num_features) +
                                ") got input with " +
                                (input.dim() < 2 ? std::string("fewer than 2 dims")
                                                 : std::to_string(input.size(1)) + " channels"));
  if (!is_training()) {
    const auto shape = channel_shape(input);
    at::Tensor y =
        (input - running_mean.view(shape)) * (running_var.view(shape) + options.eps).rsqrt();
    return options.affine ? y * weight.view(shape) + bias.view(shape) : y;
  }
  at::Tensor mean, var;
  int64_t count = 0;
  const at::Tensor none = at::empty({0});
  at::Tensor y = SyncBatchNormFunction::apply(input.contiguous(), options.affine ? weight : none,
                                              options.affine ? bias : none, group_, options.eps,
                                              &mean, &var, &count);
  torch::NoGradGuard no_grad;
  const double m = options.momentum;
  const double unbiased =
      count > 1 ? static_cast<double>(count) / static_cast<double>(count - 1) : 1.0;
  running_mean.mul_(1 - m).add_(mean, m);
  running_var.mul_(1 - m).add_(var * unbiased, m);
  num_batches_tracked.add_(1);
  return y;
}

namespace {

template <typename BatchNorm>
std::optional<SyncBatchNorm> convert_one(const std::shared_ptr<torch::nn::Module>& child,
                                         comm::Group& group) {
  auto* bn = dynamic_cast<BatchNorm*>(child.get());
  if (bn == nullptr) return std::nullopt;
  SyncBatchNormOptions o;
  o.num_features = bn->options.num_features();
  o.eps = bn->options.eps();
  o.momentum = bn->options.momentum().value_or(0.1);
  o.affine = bn->options.affine();
  SyncBatchNorm sync(group, o);
  torch::NoGradGuard no_grad;
  if (o.affine) {
    sync->weight.copy_(bn->weight);
    sync->bias.copy_(bn->bias);
  }
  if (bn->options.track_running_stats()) {
    sync->running_mean.copy_(bn->running_mean);
    sync->running_var.copy_(bn->running_var);
    sync->num_batches_tracked.copy_(bn->num_batches_tracked);
  }
  return sync;
}

bool is_batch_norm(const torch::nn::Module& m) {
  return dynamic_cast<const torch::nn::BatchNorm1dImpl*>(&m) != nullptr ||
         dynamic_cast<const torch::nn::BatchNorm2dImpl*>(&m) != nullptr;
}

}  // namespace

int convert_sync_batchnorm(torch::nn::Module& model, comm::Group& group) {
  int converted = 0;
  if (auto* seq = dynamic_cast<torch::nn::SequentialImpl*>(&model)) {
    const auto named = seq->named_children();
    for (size_t i = 0; i < seq->size(); ++i) {
      const auto child = seq->ptr(i);
      auto sync = convert_one<torch::nn::BatchNorm2dImpl>(child, group);
      if (!sync) sync = convert_one<torch::nn::BatchNorm1dImpl>(child, group);
      if (!sync) continue;
      seq->begin()[static_cast<std::ptrdiff_t>(i)] = torch::nn::AnyModule(*sync);
      seq->replace_module(named[i].key(), *sync);
      ++converted;
    }
  }
  for (const auto& child : model.children()) {
    if (is_batch_norm(*child))
      throw std::invalid_argument(
          "--sync-bn: a BatchNorm outside a Sequential cannot be converted (model layout)");
    converted += convert_sync_batchnorm(*child, group);
  }
  return converted;
}

}  // namespace dtrain::parallel
