// DDP's buffer broadcast: every rank runs each forward with rank 0's module buffers
// (BatchNorm running statistics), as PyTorch's DistributedDataParallel does with
// broadcast_buffers.
//
// Two schedules with the same result for every forward:
// - at the forward (before_forward broadcasts rank 0's buffers, one message each way);
// - early, on long links: rank 0's buffers are final once its forward has run (backward
//   and the optimizer do not touch them), so the broadcast for the next forward goes out
//   when backward starts (start_early, from backward's thread), crosses while backward and
//   the gradient exchange run, and lands in finish() at the end of the synchronized step;
//   the next before_forward only copies it into the buffers (not earlier: an evaluation in
//   between runs with each rank's own statistics, as with the other schedule). On a 25 ms link that
//   takes a rendezvous and a transfer (50 ms and more) off every step. A step whose backward does
//   not synchronize (no_sync) leaves the next forward to broadcast.
//
// Contract: collective; every rank calls the same methods in the same order. Buffers live
// on the CPU for the early schedule (the caller decides; GPU buffers broadcast at the
// forward).
#pragma once

#include <torch/nn/module.h>

#include <memory>
#include <vector>

#include "dtrain/comm/group.h"

namespace dtrain::parallel {

class BufferBroadcast {
 public:
  // `tag`: the early broadcast's messages (a tag no other message of the group uses).
  BufferBroadcast(comm::Group& group, std::shared_ptr<torch::nn::Module> model, bool early,
                  int tag);
  ~BufferBroadcast();

  // Before each training forward. Returns the seconds it took.
  double before_forward();
  // When a synchronized backward starts (early schedule only; otherwise a no-op).
  void start_early();
  // At the end of a synchronized step, after start_early(): waits for the early broadcast
  // and keeps it for the next before_forward. Returns the seconds it waited. Throws CommError on a
  // failed message.
  double finish();

 private:
  // Every non-empty buffer, and its bytes concatenated.
  std::vector<at::Tensor> buffers() const;
  void apply(const at::Tensor& flat, const std::vector<at::Tensor>& buffers) const;

  comm::Group& group_;
  std::shared_ptr<torch::nn::Module> model_;
  const bool early_;
  const int tag_;
  // The next forward needs no broadcast: construction copied rank 0's buffers, or the early
  // broadcast has brought them (staged_, on ranks other than 0).
  bool delivered_ = true;
  at::Tensor staged_;
  at::Tensor flat_;  // the early broadcast's bytes in flight
  std::vector<comm::Request> requests_;
};

}  // namespace dtrain::parallel
