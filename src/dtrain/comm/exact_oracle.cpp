#include "dtrain/comm/exact_oracle.h"

#include <ATen/ATen.h>

namespace dtrain::comm {

at::Tensor exact_input(int rank, int64_t begin, int64_t count, ReduceOp op) {
  auto i = at::arange(begin, begin + count, at::kLong);
  if (op == ReduceOp::kProduct) {
    auto k = (i * 3 + rank) % 4;  // 0, 1, 2, 3 -> 1, -1, 2, -2
    return (1 + (k >= 2).to(at::kLong)) * (1 - 2 * (k % 2));
  }
  return (i * 7 + rank * 13) % 9 - 4;
}

at::Tensor exact_reduction(int world, int64_t begin, int64_t count, ReduceOp op,
                           at::ScalarType dtype) {
  if (is_bitwise(op)) {  // exact in int64, the inputs' own type
    at::Tensor acc = exact_input(0, begin, count, op);
    for (int r = 1; r < world; ++r) {
      at::Tensor x = exact_input(r, begin, count, op);
      combine_into(acc, x, op);
    }
    return acc.to(dtype).to(at::kDouble);
  }
  at::Tensor acc = exact_input(0, begin, count, op).to(at::kDouble);
  for (int r = 1; r < world; ++r) {
    const at::Tensor x = exact_input(r, begin, count, op).to(at::kDouble);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        acc += x;
        break;
      case ReduceOp::kProduct:
        acc *= x;
        break;
      case ReduceOp::kMin:
        acc = at::minimum(acc, x);
        break;
      case ReduceOp::kMax:
        acc = at::maximum(acc, x);
        break;
      case ReduceOp::kBitwiseAnd:
      case ReduceOp::kBitwiseOr:
      case ReduceOp::kBitwiseXor:
        break;  // above
    }
  }
  if (op == ReduceOp::kAvg)
    acc = at::isFloatingType(dtype) ? acc / world : at::div(acc, world, "trunc");
  return acc.to(dtype).to(at::kDouble);
}

}  // namespace dtrain::comm
