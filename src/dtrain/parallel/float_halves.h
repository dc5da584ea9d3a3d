// float32 values split into the upper and the lower 16 bits of each, so that a state can go
// coarse first: the upper halves alone are the values truncated to bfloat16 (sign, exponent
// and 7 bits of mantissa: within 2^-7 of each normal value, relatively), and with the lower
// halves they join back to the exact bits. An elastic joiner trains on the coarse values
// while the rest arrives (docs/elastic.md).
//
// Each half is carried as a float32 tensor of ceil(count / 2) values (two halves a value;
// its bits need not be a number): the transport moves bytes.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace dtrain::parallel {

// `values`: contiguous float32 on the CPU, one dimension.
at::Tensor upper_halves(const at::Tensor& values);
// The float32 values that carry one half of `count` values: ceil(count / 2).
int64_t half_values(int64_t count);
at::Tensor lower_halves(const at::Tensor& values);
// The `count` values back: from both halves exactly, or (lower undefined) the coarse ones,
// their lower bits zero. Throws std::invalid_argument where a half is not ceil(count / 2)
// float32 values.
at::Tensor join_halves(const at::Tensor& upper, const at::Tensor& lower, int64_t count);

}  // namespace dtrain::parallel
