// Codec value coding with LibTorch tensor operations, on whichever device holds the values:
// a CUDA tensor is quantized and bit-packed on its GPU and only the packet's table and
// payload cross to host memory (a quarter of the floats at 8 bits); a packet decodes on
// the GPU from its payload with one gather. The bytes and values are exactly those of the
// CPU kernels (Codec::encode_values / decode_values):
//  - min/max and order statistics run on the same order-preserving integer keys as the CPU's
//    (selection.h), so -0 and +0 are ordered alike;
//  - quantization is the same IEEE float32 subtraction, division, clamp and round to
//    nearest even, one correctly rounded operation at a time (the divisor is a tensor on
//    the values' device: a CPU-scalar divisor lets CUDA multiply by its reciprocal);
//  - decoding gathers from the host-computed value of every code (Codec::code_values).
// Each family's kernels sit in its own file (built from tensor_kernels.h); the tests check
// them on CPU tensors against the CPU kernels, the GPU test CUDA tensors against CPU packets.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "dtrain/compress/codec.h"

namespace dtrain::compress {

// The codec's tensor kernels (Codec::encode_tensor / decode_tensor), for callers that hold
// the pieces of a packet. values: a 1-D contiguous float32 tensor on any device. Writes
// codec.table_bytes(n) and codec.payload_bytes(n) host bytes, identical to
// codec.encode_values. Throws std::invalid_argument on NaN or Inf, or where
// !codec.encodes_tensors() (kmeans: its Lloyd iterations run on a histogram on the CPU,
// and CUDA's float sums would change their order).
void encode_with_tensor_ops(const Codec& codec, const at::Tensor& values, uint8_t* table,
                            uint8_t* payload);

// n float32 values on `device`, equal to codec.decode_values on the same host table and
// payload; the payload is copied to the device and decoded there. Throws CorruptPacket on
// an invalid table.
at::Tensor decode_with_tensor_ops(const Codec& codec, const uint8_t* table, const uint8_t* payload,
                                  int64_t n, const c10::Device& device);

}  // namespace dtrain::compress
