// `bench collective`'s buffers: exact inputs for every op, the collective run on them, and
// the count of elements that differ from the exact expected result.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <utility>

#include "dtrain/comm/group.h"
#include "dtrain/comm/reduce_op.h"
#include "dtrain/metrics/bandwidth.h"

namespace dtrain::cli {

using Op = metrics::CollectiveKind;

struct Buffers {
  at::Tensor input;         // pristine copy
  at::Tensor work;          // what the collective runs on
  at::Tensor output;        // reduce_scatter's block
  int64_t check_begin = 0;  // global index of work/output's first element
};

Buffers make_buffers(Op op, comm::ReduceOp rop, const comm::Group& g, int64_t count,
                     at::ScalarType dtype, const c10::Device& device);
// One run of `algo` on the buffers.
void run_once(Op op, const std::string& algo, comm::Group& g, Buffers& b, comm::ReduceOp rop,
              int64_t segment_bytes);
// Puts the input back where the collective works in place.
void restore(Op op, Buffers& b);
// The elements that differ from the exact expectation, and the largest difference.
std::pair<int64_t, double> check(Op op, comm::ReduceOp rop, int p, int64_t total, const Buffers& b,
                                 at::ScalarType dtype);

}  // namespace dtrain::cli
