// Reduction operators and the local (in-memory) combine step every algorithm shares.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

namespace dtrain::comm {

// The bitwise ops take integer and bool tensors only (check_reduce_op).
enum class ReduceOp { kSum, kAvg, kMin, kMax, kProduct, kBitwiseAnd, kBitwiseOr, kBitwiseXor };

// "sum", "avg", "min", "max", "product" (also "prod"), "band", "bor", "bxor"; throws
// std::invalid_argument.
ReduceOp parse_reduce_op(const std::string& name);
std::string to_string(ReduceOp op);
bool is_bitwise(ReduceOp op);

// Throws std::invalid_argument naming both where `op` cannot reduce `dtype` (a bitwise op of
// a floating or complex tensor; a comparison of complex ones).
void check_reduce_op(ReduceOp op, at::ScalarType dtype);

// dst = dst (op) src, elementwise, in place. AVG combines as SUM; the division happens once
// in finalize_reduction, by the rank that owns the fully reduced block.
void combine_into(at::Tensor& dst, const at::Tensor& src, ReduceOp op);

// Turns a fully reduced block into the final result: divides by world_size for AVG
// (integers truncate toward zero), no-op otherwise.
void finalize_reduction(at::Tensor& block, ReduceOp op, int world_size);

}  // namespace dtrain::comm
