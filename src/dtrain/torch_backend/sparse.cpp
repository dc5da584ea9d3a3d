// The dtrain backend's all-reduce of a sparse (COO) tensor (process_group.h): the sum, as
// gloo's. Every rank's coalesced indices and values are gathered, padded to the largest
// count, then joined in rank order and coalesced: the same result on every rank.
#include <ATen/ATen.h>

#include <algorithm>
#include <memory>

#include "dtrain/comm/collectives.h"
#include "dtrain/comm/group.h"
#include "dtrain/torch_backend/process_group.h"

namespace dtrain::torch_backend {
namespace {

// Every rank's `mine` (the same number of elements on each), one row per rank.
at::Tensor gather_rows(comm::Group& group, const at::Tensor& mine) {
  at::Tensor all = at::empty({group.size(), mine.numel()}, mine.options());
  at::Tensor flat = all.view({-1});
  comm::all_gather(group, mine.contiguous().view({-1}), flat);
  return all;
}

// What every rank must agree on before their parts can be joined, checked on every rank.
void check_alike(comm::Group& group, const at::Tensor& mine) {
  std::vector<int64_t> shape = {mine.sparse_dim(), mine.dense_dim(),
                                static_cast<int64_t>(mine.scalar_type())};
  for (const int64_t d : mine.sizes())
    shape.push_back(d);
  const at::Tensor count = gather_rows(group, at::tensor({static_cast<int64_t>(shape.size())}));
  if (!count.eq(count[0]).all().item<bool>())
    throw std::invalid_argument(
        "dtrain backend: sparse allreduce of tensors of different ranks "
        "(number of dimensions) on different ranks of the group");
  const at::Tensor all = gather_rows(group, at::tensor(shape));
  if (!all.eq(all[0]).all().item<bool>())
    throw std::invalid_argument(
        "dtrain backend: sparse allreduce of tensors whose sizes, sparse / dense dimensions or "
        "dtypes differ between ranks of the group");
}

// Rows 0..n of `part` in a buffer of `rows` rows (zeros after them).
at::Tensor padded(const at::Tensor& part, int64_t rows, int64_t dim) {
  auto sizes = part.sizes().vec();
  sizes[static_cast<size_t>(dim)] = rows;
  at::Tensor out = at::zeros(sizes, part.options());
  out.narrow(dim, 0, part.size(dim)).copy_(part);
  return out;
}

at::Tensor sparse_sum(comm::Group& group, const at::Tensor& input) {
  const at::Tensor mine = input.to(at::kCPU).coalesce();
  check_alike(group, mine);
  const at::Tensor counts = gather_rows(group, at::tensor({mine._nnz()})).view({-1});
  const int64_t most = counts.max().item<int64_t>();
  if (most == 0) return at::zeros_like(mine);
  const at::Tensor indices = gather_rows(group, padded(mine._indices(), most, 1));
  const at::Tensor values = gather_rows(group, padded(mine._values(), most, 0));
  auto value_shape = mine._values().sizes().vec();
  value_shape[0] = most;
  std::vector<at::Tensor> all_indices, all_values;
  for (int r = 0; r < group.size(); ++r) {
    const int64_t n = counts[r].item<int64_t>();
    all_indices.push_back(indices[r].view({mine.sparse_dim(), most}).narrow(1, 0, n));
    all_values.push_back(values[r].view(value_shape).narrow(0, 0, n));
  }
  return at::sparse_coo_tensor(at::cat(all_indices, 1), at::cat(all_values, 0), mine.sizes(),
                               mine.options())
      .coalesce();
}

}  // namespace

ProcessGroupDtrain::WorkPtr ProcessGroupDtrain::sparse_allreduce(
    Tensors& tensors, const c10d::AllreduceOptions& opts) {
  if (opts.reduceOp.op_ != c10d::ReduceOp::SUM)
    throw std::invalid_argument("dtrain backend: a sparse allreduce sums (ReduceOp.SUM only)");
  if (tensors[0].layout() != at::kSparse)
    throw std::invalid_argument("dtrain backend: allreduce of a sparse layout other than COO");
  return enqueue(c10d::OpType::ALLREDUCE, tensors, [this, tensor = tensors[0]]() mutable {
    tensor.copy_(sparse_sum(*group_, tensor));
  });
}

}  // namespace dtrain::torch_backend
