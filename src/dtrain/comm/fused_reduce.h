// A reduction step fused with the wire check (group.h, Integrity): the collective
// algorithms checksum the bytes they receive and send while they reduce them, instead of
// in passes of their own, so a checked all-reduce reads its data no more often than an
// unchecked one.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "dtrain/base/crc32c.h"
#include "dtrain/comm/reduce_op.h"

namespace dtrain::comm {

struct ReduceCrcs {
  uint32_t in = 0;   // CRC32C of `src`'s bytes
  uint32_t out = 0;  // CRC32C of `dst`'s bytes after the step
};

// dst = dst (op) src, then, when `finalize_world` > 0, finalize_reduction(dst, op,
// finalize_world); returns the CRC32C of src's bytes and of dst's result. Bitwise the
// values of combine_into and finalize_reduction. float32 sum and avg run in one pass over
// the bytes where `kernel` is a hardware one (crc32c.h); everything else runs the steps one
// after another. `kernel` must be at most crc32c_kernel() (tests pass each in turn).
ReduceCrcs combine_with_crcs(at::Tensor& dst, const at::Tensor& src, ReduceOp op,
                             int finalize_world, Crc32cKernel kernel = crc32c_kernel());

namespace detail {
// The kCarrylessFold pass (fused_reduce_fold.cpp): dst[i] = dst[i] + src[i] (then / divisor)
// for the first `done` = n / 64 * 64 floats (n >= 64), with the CRC registers (from ~0, not
// inverted) of src's bytes and of the results.
struct FoldedSums {
  uint32_t in, out;
  int64_t done;
};
FoldedSums add_floats_fold(float* dst, const float* src, int64_t n, bool divide, float divisor);
}  // namespace detail

}  // namespace dtrain::comm
