// The exact-result oracle of the collectives, shared by `dtrain bench collective`'s check
// and the tests: every rank's input is small integers (sums, products of +-1 and +-2, and
// averages are exact in every dtype), and the expected reduction is computed
// independently in float64 and rounded once to the dtype.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "dtrain/comm/reduce_op.h"

namespace dtrain::comm {

// Rank `rank`'s values at global indices [begin, begin + count), as int64.
at::Tensor exact_input(int rank, int64_t begin, int64_t count, ReduceOp op);

// The reduction of exact_input over ranks 0..world-1 at [begin, begin + count), rounded to
// `dtype` and returned as float64.
at::Tensor exact_reduction(int world, int64_t begin, int64_t count, ReduceOp op,
                           at::ScalarType dtype);

}  // namespace dtrain::comm
