// Internal: the pieces the codec families' tensor-operation kernels (Codec::encode_tensor)
// are built from, on whichever device holds the values. Each is the exact counterpart of a
// CPU kernel's step (codecs.h, selection.h, bitpack.h), so the packets are the same bytes.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace dtrain::compress {

// selection.h's order_key with the sign bit flipped, so that signed int32 comparisons
// (sort, aminmax) order it: non-negative floats keep their bits, negatives flip all but
// the sign. value_of_signed_key inverts it.
int32_t signed_key(float v);
float value_of_signed_key(int32_t key);
at::Tensor signed_keys(const at::Tensor& values);  // elementwise, int32

// Host copies of the keys at `ranks` of `keys` (1-D, on any device), in one transfer.
std::vector<int32_t> keys_at(const at::Tensor& keys, const std::vector<int64_t>& ranks);

// Throws the codecs' NaN/Inf error unless both keys are those of finite floats.
void require_finite_keys(int32_t lowest, int32_t highest);

// Minimum and maximum in key order (-0 below +0), as the CPU's finite_range finds them;
// throws on NaN or Inf.
struct KeyRange {
  float lo, hi;
};
KeyRange finite_key_range(const at::Tensor& values);

// quantize() of codecs.h, elementwise: round-half-even((x - lo) / step) clamped to
// [0, max_level], 0 where step is 0. lo and step broadcast against x and live on its
// device (a CPU-scalar divisor lets CUDA multiply by its reciprocal instead of dividing).
at::Tensor quantize_levels(const at::Tensor& x, const at::Tensor& lo, const at::Tensor& step,
                           int max_level);

// bitpack.h's pack_bits / unpack_bits over whole tensors of int32 codes (< 2^bits).
at::Tensor pack_codes(const at::Tensor& codes, int bits);
at::Tensor unpack_codes(const at::Tensor& payload, int64_t n, int bits);

// Copies a uint8 tensor (any device) to host memory at `out`.
void copy_to_host(const at::Tensor& bytes, uint8_t* out);

// `bytes` host bytes as a uint8 tensor on `device` (a copy, never aliasing them).
at::Tensor bytes_on(const uint8_t* bytes, int64_t count, const c10::Device& device);

}  // namespace dtrain::compress
