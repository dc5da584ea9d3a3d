// An all-reduce whose receives are posted before its data exists, for long links.
//
// Gloo sends a message only once the receiver's notice that its receive is posted has
// arrived (its TCP pair's rendezvous). Posted at the moment of the exchange, as every
// collective algorithm posts them, each message therefore costs a round trip plus its
// transfer: on a 25 ms one-way link a two-rank ring all-reduce (2 messages in a row) takes
// 4 one-way delays before any byte of bandwidth counts. arm() posts every receive of the
// next run() into buffers of its own while the data is still being computed (DDP arms its
// buckets when backward starts): by the time run() sends, the notices have crossed, and
// each message costs one one-way delay. Run per call without arming ahead (all_reduce's
// "exchange" algorithm), it still saves the later messages' round trips: 2 ranks pay one
// rendezvous and one transfer, where the ring pays two of each.
//
// The algorithm: with 2 ranks each sends its whole buffer and both sum the two in rank
// order (1 message, the ring's bytes); with p > 2 each rank sends block j to rank j, which
// reduces the p contributions in rank order and sends its block to every other rank
// (2 messages, direct.cpp's exchange). Every rank gets bit-identical results. Messages are
// checked like every point-to-point message (group.h's wire check).
//
// On links with openings (group.h) a message the opening's capacity holds goes as one, for
// collective tags: its receive is the group's, posted since the last call, so even run per
// call a 2-rank exchange costs one one-way delay and its transfer. A longer message leads
// with an opening and sends the rest after it (Group::isend_opening_first): the rest's
// notice crosses while the opening's bytes do.
//
// Contract: collective and SPMD. Every rank creates it with the same count and tag, and
// calls arm() and run() the same number of times in the same order with no other message
// of its two tags in between. run() without arm() arms first (correct, only
// slower). A run must follow every arm() before the group is destroyed: armed receives
// cannot be taken back, and a peer that closes meanwhile fails them.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "dtrain/comm/group.h"
#include "dtrain/comm/reduce_op.h"

namespace dtrain::comm {

class ArmedAllReduce {
 public:
  // Buffers of `count` values of `dtype` on the CPU; contributions carry `contribution_tag`,
  // reduced blocks (p > 2) `reduced_tag`.
  ArmedAllReduce(Group& group, int64_t count, int contribution_tag, int reduced_tag,
                 at::ScalarType dtype = at::kFloat);
  // Gives the staging memory back to the group (unless a receive may still write to it).
  ~ArmedAllReduce();
  ArmedAllReduce(const ArmedAllReduce&) = delete;
  ArmedAllReduce& operator=(const ArmedAllReduce&) = delete;

  // Posts every receive of the next run(). A no-op when already armed.
  void arm();
  bool armed() const { return armed_; }
  // Reduces `flat` (contiguous, CPU, `count` values of the dtype) in place across the ranks,
  // then leaves the object disarmed. Throws CommError (group.h) on a failed message.
  // run() is start() then finish(): start() sends this rank's contributions (arming first
  // if need be) and returns; finish() waits for the others, reduces and (p > 2) exchanges
  // the reduced blocks. Between the two, `flat` must not change, and the caller may start
  // other runs (DDP starts each bucket as backward completes it, on backward's thread,
  // and finishes them in order on its communication thread).
  void run(at::Tensor& flat, ReduceOp op);
  void start(const at::Tensor& flat);
  void finish(at::Tensor& flat, ReduceOp op);
  bool started() const { return started_; }

 private:
  Group& group_;
  const int64_t count_;
  const at::ScalarType dtype_;
  const int contribution_tag_;
  const int reduced_tag_;
  const int64_t own_;  // values this rank reduces: all of them with 2 ranks, else its block
  // One buffer from the group's scratch (Group::take_scratch: reused from call to call when
  // all_reduce's "exchange" makes one per call), viewed as: where the armed receives land
  // (2 ranks, the peer's whole buffer; p > 2, the p - 1 contributions to this rank's
  // block), the sum in rank order, and (p > 2) the other ranks' reduced blocks.
  at::Tensor scratch_;
  at::Tensor contributions_;
  at::Tensor sum_;
  at::Tensor reduced_;
  // Where rank j's reduced block lands in reduced_ (p > 2, j != this rank).
  at::Tensor reduced_block(int j) const;
  std::vector<Request> contribution_recvs_;
  std::vector<Request> reduced_recvs_;
  std::vector<Request> sends_;
  bool armed_ = false;
  bool started_ = false;
};

}  // namespace dtrain::comm
