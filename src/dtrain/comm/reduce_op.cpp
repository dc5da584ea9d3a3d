#include "dtrain/comm/reduce_op.h"

#include <ATen/ATen.h>

#include <stdexcept>

#include "dtrain/base/names.h"

namespace dtrain::comm {

namespace {
// "prod" is accepted as an alias; printing uses the first name.
const EnumNames<ReduceOp> kReduceOpNames("reduce op", {{ReduceOp::kSum, "sum"},
                                                       {ReduceOp::kAvg, "avg"},
                                                       {ReduceOp::kMin, "min"},
                                                       {ReduceOp::kMax, "max"},
                                                       {ReduceOp::kProduct, "product"},
                                                       {ReduceOp::kProduct, "prod"}});
}  // namespace

ReduceOp parse_reduce_op(const std::string& name) {
  return kReduceOpNames.parse(name);
}

std::string to_string(ReduceOp op) {
  return kReduceOpNames.to_string(op);
}

void combine_into(at::Tensor& dst, const at::Tensor& src, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      dst.add_(src);
      return;
    case ReduceOp::kProduct:
      dst.mul_(src);
      return;
    case ReduceOp::kMin:
      at::minimum_out(dst, dst, src);
      return;
    case ReduceOp::kMax:
      at::maximum_out(dst, dst, src);
      return;
  }
}

void finalize_reduction(at::Tensor& block, ReduceOp op, int world_size) {
  if (op != ReduceOp::kAvg || world_size == 1 || block.numel() == 0) return;
  if (at::isFloatingType(block.scalar_type())) {
    block.div_(world_size);
  } else {
    block.div_(world_size, "trunc");
  }
}

}  // namespace dtrain::comm
