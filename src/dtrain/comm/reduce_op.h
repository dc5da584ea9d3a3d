// Reduction operators and the local (in-memory) combine step every algorithm shares.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

namespace dtrain::comm {

enum class ReduceOp { kSum, kAvg, kMin, kMax, kProduct };

// "sum", "avg", "min", "max", "product" (also "prod"); throws std::invalid_argument.
ReduceOp parse_reduce_op(const std::string& name);
std::string to_string(ReduceOp op);

// dst = dst (op) src, elementwise, in place. AVG combines as SUM; the division happens once
// in finalize_reduction, by the rank that owns the fully reduced block.
void combine_into(at::Tensor& dst, const at::Tensor& src, ReduceOp op);

// Turns a fully reduced block into the final result: divides by world_size for AVG
// (integers truncate toward zero), no-op otherwise.
void finalize_reduction(at::Tensor& block, ReduceOp op, int world_size);

}  // namespace dtrain::comm
