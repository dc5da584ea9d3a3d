// Exact means over a group of the few, small tensors that rare steps average (DiLoCo's
// outer exchange, BatchNorm statistics): by all_reduce's "exchange" (comm/armed_all_reduce.h:
// with 2 ranks one message each way, with more two, each going out at once through an
// opening on a long link), not --algo auto, whose calibration (every algorithm timed on a
// kind's first call) rare calls never pay back (it took 12 s on a 20 Mbit/s link), nor the
// ring, whose 2(p - 1) messages in a row cost a one-way delay each: on a 50 Mbit/s link with
// 100 ms one way a 336 KiB mean of 2 ranks took 502 ms by the ring and 251 ms by the
// exchange, the ring's bytes either way. Every rank sums in rank order: bit-identical
// results. Several tensors go in one message (exact_means), since each costs a delay.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <vector>

namespace dtrain::comm {
class Group;
}

namespace dtrain::parallel {

// In place; collective (every rank, the same length). `tag` and the next carry it (none:
// all_reduce's own): users in flight at once on one group need tags of their own.
void exact_mean(comm::Group& group, at::Tensor& values, std::optional<int> tag = std::nullopt);

// The tensors concatenated, flat, as float32 on the CPU: one message's worth.
at::Tensor flatten_to_host(const std::vector<at::Tensor>& tensors);
// Copies consecutive ranges of `flat` back into the tensors (the order of flatten_to_host).
void copy_from_flat(const at::Tensor& flat, const std::vector<at::Tensor>& tensors);

// All three: each tensor replaced by its mean over the group, all in one message; undefined
// ones are skipped (collective: every rank the same tensors' lengths).
void exact_means(comm::Group& group, const std::vector<at::Tensor>& tensors,
                 std::optional<int> tag = std::nullopt);

}  // namespace dtrain::parallel
