// What one codec costs on one real tensor: exact packet bytes, encode and decode seconds
// (best of two runs, so a first-touch page fault does not decide). Both auto tuners use
// it on the tensors their step really sent.
#pragma once

#include <ATen/core/Tensor.h>

#include "dtrain/parallel/auto_codec.h"

namespace dtrain::parallel {

CandidateCost time_codec(const compress::CodecSpec& spec, const at::Tensor& sample);

}  // namespace dtrain::parallel
