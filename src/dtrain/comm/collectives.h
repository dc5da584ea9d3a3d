// Broadcast, reduce_scatter and all_gather on the same point-to-point machinery as
// all_reduce. Flat element order; every rank passes the same counts and dtype.
//
// Block layout: n elements split into p nearly equal blocks, block i =
// [i*n/p, (i+1)*n/p). reduce_scatter leaves block `rank` of the reduction in `out`;
// all_gather takes this rank's block and fills the whole vector.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

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

// Rooted, one message each way between the root and every other rank (rooted.cpp), any
// dtype, contiguous CPU tensors:
// - gather: `root` receives rank i's `mine` into `parts[i]` (its own copied), every part of
//   the size the sender's `mine` has; other ranks pass no parts.
// - scatter: rank i receives `root`'s `parts[i]` into `mine`; other ranks pass no parts.
void gather(Group& group, const at::Tensor& mine, std::vector<at::Tensor>& parts, int root);
void scatter(Group& group, const std::vector<at::Tensor>& parts, at::Tensor& mine, int root);

// Every rank sends `out[j]` to rank j and receives rank j's into `in[j]` (its own copied),
// every receive posted before the first send (all_to_all.cpp). Each pair's sizes must agree
// (`in[j]` on rank i has the bytes of `out[i]` on rank j); empty ones send nothing.
void all_to_all(Group& group, const std::vector<at::Tensor>& out, std::vector<at::Tensor>& in);

}  // namespace dtrain::comm
