#include "dtrain/comm/reduce_op.h"

#include <ATen/ATen.h>

#include <stdexcept>

namespace dtrain::comm {

ReduceOp parse_reduce_op(const std::string& name) {
  if (name == "sum") return ReduceOp::kSum;
  if (name == "avg") return ReduceOp::kAvg;
  if (name == "min") return ReduceOp::kMin;
  if (name == "max") return ReduceOp::kMax;
  if (name == "product" || name == "prod") return ReduceOp::kProduct;
  throw std::invalid_argument("unknown reduce op '" + name +
                              "' (expected sum, avg, min, max or product)");
}

std::string to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kProduct:
      return "product";
  }
  return "?";
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
