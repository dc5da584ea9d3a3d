// Exact means over a group of the few, small tensors that rare steps average (DiLoCo's
// outer exchange, BatchNorm statistics): by the ring, not --algo auto, whose calibration
// (every algorithm timed on a kind's first call) rare calls never pay back (it took 12 s
// on a 20 Mbit/s link); and several tensors in one message, since on a long link each
// message costs a round trip.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

namespace dtrain::comm {
class Group;
}

namespace dtrain::parallel {

// In place; collective (every rank, the same length).
void exact_mean(comm::Group& group, at::Tensor& values);

// The tensors concatenated, flat, as float32 on the CPU: one message's worth.
at::Tensor flatten_to_host(const std::vector<at::Tensor>& tensors);
// Copies consecutive ranges of `flat` back into the tensors (the order of flatten_to_host).
void copy_from_flat(const at::Tensor& flat, const std::vector<at::Tensor>& tensors);

// All three: each tensor replaced by its mean over the group (collective).
void exact_means(comm::Group& group, const std::vector<at::Tensor>& tensors);

}  // namespace dtrain::parallel
