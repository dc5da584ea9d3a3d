#include "dtrain/parallel/exact_mean.h"

#include <ATen/ATen.h>

#include "dtrain/comm/allreduce.h"

namespace dtrain::parallel {

void exact_mean(comm::Group& group, at::Tensor& values, std::optional<int> tag) {
  comm::AllReduceOptions o;
  o.op = comm::ReduceOp::kAvg;
  o.algorithm = comm::Algorithm::kExchange;
  if (tag) o.tag = *tag;
  comm::all_reduce(group, values, o);
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

void exact_means(comm::Group& group, const std::vector<at::Tensor>& tensors,
                 std::optional<int> tag) {
  std::vector<at::Tensor> defined;
  for (const auto& t : tensors)
    if (t.defined()) defined.push_back(t);
  if (defined.empty()) return;
  at::Tensor flat = flatten_to_host(defined);
  exact_mean(group, flat, tag);
  copy_from_flat(flat, defined);
}

}  // namespace dtrain::parallel
