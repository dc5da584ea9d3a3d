// Broadcast, reduce_scatter and all_gather on the same point-to-point machinery as
// all_reduce. Flat element order; every rank passes the same counts and dtype.
//
// Block layout: n elements split into p nearly equal blocks, block i =
// [i*n/p, (i+1)*n/p). reduce_scatter leaves block `rank` of the reduction in `out`;
// all_gather takes this rank's block and fills the whole vector.
#pragma once

#include <ATen/core/Tensor.h>

#include "dtrain/comm/reduce_op.h"

namespace dtrain::comm {

class Group;

enum class BroadcastAlgorithm { kAuto, kBinomialTree, kScatterAllGather };

// In place; `tensor` holds the data on `root` and is overwritten everywhere else.
// kAuto uses the binomial tree up to 256 KiB, scatter + ring all-gather above.
void broadcast(Group& group, at::Tensor& tensor, int root,
               BroadcastAlgorithm algo = BroadcastAlgorithm::kAuto);

// Number of elements in block `index` of a `count`-element vector over `parts` ranks.
int64_t block_count(int64_t count, int parts, int index);

// `input` holds the full vector (n elements) and is used as scratch; `out` receives this
// rank's reduced block (block_count(n, p, rank) elements).
void reduce_scatter(Group& group, at::Tensor& input, at::Tensor& out, ReduceOp op);

// `mine` is this rank's block (block_count(n, p, rank) elements), `out` has n elements.
void all_gather(Group& group, const at::Tensor& mine, at::Tensor& out);

}  // namespace dtrain::comm
