#include "dtrain/parallel/exact_mean.h"

#include <ATen/ATen.h>

#include "dtrain/comm/allreduce.h"

namespace dtrain::parallel {

void exact_mean(comm::Group& group, at::Tensor& values) {
  comm::AllReduceOptions o;
  o.op = comm::ReduceOp::kAvg;
  o.algorithm = comm::Algorithm::kExchange;
  comm::all_reduce(group, values, o);
}

std::pair<at::Tensor, at::Tensor> exact_mean_with(comm::Group& group, const at::Tensor& values,
                                                  const at::Tensor& also) {
  if (!also.defined() || also.numel() == 0) {
    at::Tensor mean = values.clone();
    exact_mean(group, mean);
    return {mean, also};
  }
  at::Tensor both = at::cat({values.reshape({-1}), also.reshape({-1})});
  exact_mean(group, both);
  return {both.narrow(0, 0, values.numel()).view_as(values),
          both.narrow(0, values.numel(), also.numel()).view_as(also)};
}

at::Tensor flatten_to_host(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> parts;
  for (const auto& t : tensors)
    parts.push_back(t.to(at::kCPU, at::kFloat).reshape({-1}));
  return at::cat(parts);
}

void copy_from_flat(const at::Tensor& flat, const std::vector<at::Tensor>& tensors) {
  int64_t offset = 0;
  for (const auto& t : tensors) {
    at::Tensor target = t;
    target.copy_(flat.narrow(0, offset, t.numel()).view_as(t));
    offset += t.numel();
  }
}

void exact_means(comm::Group& group, const std::vector<at::Tensor>& tensors) {
  if (tensors.empty()) return;
  at::Tensor flat = flatten_to_host(tensors);
  exact_mean(group, flat);
  copy_from_flat(flat, tensors);
}

}  // namespace dtrain::parallel
