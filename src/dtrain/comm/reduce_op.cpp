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
                                                       {ReduceOp::kProduct, "prod"},
                                                       {ReduceOp::kBitwiseAnd, "band"},
                                                       {ReduceOp::kBitwiseOr, "bor"},
                                                       {ReduceOp::kBitwiseXor, "bxor"}});
}  // namespace

bool is_bitwise(ReduceOp op) {
  return op == ReduceOp::kBitwiseAnd || op == ReduceOp::kBitwiseOr || op == ReduceOp::kBitwiseXor;
}

void check_reduce_op(ReduceOp op, at::ScalarType dtype) {
  const bool whole = at::isIntegralType(dtype, /*includeBool=*/true);
  const bool complex = at::isComplexType(dtype);
  if ((is_bitwise(op) && !whole) || (complex && (op == ReduceOp::kMin || op == ReduceOp::kMax)))
    throw std::invalid_argument("reduce op " + to_string(op) + " cannot reduce " +
                                std::string(c10::toString(dtype)) + " tensors");
}

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
    case ReduceOp::kBitwiseAnd:
      dst.bitwise_and_(src);
      return;
    case ReduceOp::kBitwiseOr:
      dst.bitwise_or_(src);
      return;
    case ReduceOp::kBitwiseXor:
      dst.bitwise_xor_(src);
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
