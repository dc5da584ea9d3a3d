// Internal: the collective algorithms behind all_reduce and the other collectives.
// `flat` is a contiguous 1-D tensor, identical in count and dtype on every rank.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "dtrain/comm/reduce_op.h"

namespace dtrain::comm {
class Group;
namespace detail {

// Ring steps 0..2p-3: steps [0, p-1) reduce-scatter (rank r ends owning block r, finalized),
// steps [p-1, 2p-2) all-gather (rank r starts from block r). Running a sub-range gives
// reduce_scatter or all_gather alone; the full range is the all-reduce.
void ring_steps(Group& group, at::Tensor& flat, ReduceOp op, int tag, int64_t segment_bytes,
                int first_step, int end_step);

// Whether this rank's ring posts each step's receives a step early (ring.cpp, "Look-ahead"):
// more than 2 ranks (with 2, a step receives into the block the step before sends), a round
// trip of kLongRttSeconds or more from its left neighbour, and a step's block of at most
// kRingLookAheadMaxBytes. On a 1 Gbit/s link of 25 ms each way, 4 ranks, looking ahead made
// the ring 1.1-2x faster with blocks up to 8 MiB; with 16 and 64 MiB blocks it was level
// and with 32 MiB blocks 4-9 % slower (docs/results.md, "Collectives and links").
constexpr int64_t kRingLookAheadMaxBytes = int64_t{8} << 20;
bool ring_looks_ahead(const Group& group, int64_t block_bytes);

void ring_all_reduce(Group& group, at::Tensor& flat, ReduceOp op, int tag, int64_t segment_bytes);
void butterfly_all_reduce(Group& group, at::Tensor& flat, ReduceOp op, int tag);
void direct_all_reduce(Group& group, at::Tensor& flat, ReduceOp op, int tag);

// Whether a rank posts its receive before its send of `send_bytes`, where it does both with
// one peer or more at once. Gloo sends data only to a posted receive, and a receive's
// notice queues behind this rank's own outgoing data on the pair's one connection: posted
// after a large send, it waits for that send to cross, and on a slow link the two
// directions then take turns (half the rate). Small sends are quicker the other way round
// on loopback (docs/results.md, "Slow links and auto").
constexpr int64_t kReceiveFirstMinBytes = 128 * 1024;
constexpr bool receive_first(int64_t send_bytes) {
  return send_bytes >= kReceiveFirstMinBytes;
}
// Posts one exchange's receives and sends in the order receive_first(send_bytes) gives.
template <typename PostReceives, typename PostSends>
void post_exchange(int64_t send_bytes, PostReceives&& post_receives, PostSends&& post_sends) {
  if (receive_first(send_bytes)) {
    post_receives();
    post_sends();
  } else {
    post_sends();
    post_receives();
  }
}

// Below this many bytes butterfly exchanges whole vectors (recursive doubling) instead of
// halving them: latency, not bandwidth, dominates.
constexpr int64_t kRecursiveDoublingMaxBytes = 16 * 1024;

}  // namespace detail
}  // namespace dtrain::comm
