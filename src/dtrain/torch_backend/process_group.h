// Internal to torch_backend: the c10d::Backend over a comm::Group (backend.h has the
// contract). The operations sit in four files: process_group.cpp (connection, the job
// queue, sends and receives, barrier), reductions.cpp (allreduce, reduce, broadcast),
// sparse.cpp (allreduce of a sparse tensor) and gathers.cpp (allgather, gather, scatter,
// reduce_scatter, alltoall).
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "dtrain/comm/allreduce.h"
#include "dtrain/torch_backend/work.h"

namespace dtrain::comm {
class Group;
class KeyValueStore;
}  // namespace dtrain::comm
namespace dtrain::parallel {
class BackgroundWorker;
}

namespace dtrain::torch_backend {

class Waiters;

// c10d's reduce op as comm's (PREMUL_SUM: a SUM of premultiplied inputs); throws naming an
// op comm lacks.
comm::ReduceOp comm_op(const c10d::ReduceOp& op);
// PREMUL_SUM's scaling of an input, in place (nothing for the other ops).
void premultiply(at::Tensor& host, const c10d::ReduceOp& op);
// The one tensor of a call that takes one; throws naming `operation` otherwise.
const at::Tensor& single(const std::vector<at::Tensor>& tensors, const char* operation);

class ProcessGroupDtrain final : public c10d::Backend {
 public:
  using WorkPtr = c10::intrusive_ptr<c10d::Work>;
  using Tensors = std::vector<at::Tensor>;

  ProcessGroupDtrain(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                     std::chrono::milliseconds timeout);
  ~ProcessGroupDtrain() override;

  const std::string getBackendName() const override { return "dtrain"; }
  void setSequenceNumberForGroup() override {}
  uint64_t getSequenceNumberForGroup() override { return sequence_; }
  void setTimeout(std::chrono::milliseconds timeout) override { timeout_ = timeout; }
  void abort() override;
  void shutdown() override;
  // DTRAIN_ALGO's, or default_algorithm().
  comm::Algorithm all_reduce_algorithm() const { return algorithm_.value_or(default_algorithm()); }

  WorkPtr broadcast(Tensors& tensors, const c10d::BroadcastOptions& opts) override;
  WorkPtr allreduce(Tensors& tensors, const c10d::AllreduceOptions& opts) override;
  WorkPtr allreduce_coalesced(Tensors& tensors,
                              const c10d::AllreduceCoalescedOptions& opts) override;
  WorkPtr reduce(Tensors& tensors, const c10d::ReduceOptions& opts) override;
  WorkPtr allgather(std::vector<Tensors>& outputs, Tensors& inputs,
                    const c10d::AllgatherOptions& opts) override;
  WorkPtr _allgather_base(at::Tensor& output, at::Tensor& input,
                          const c10d::AllgatherOptions& opts) override;
  WorkPtr allgather_coalesced(std::vector<Tensors>& outputs, Tensors& inputs,
                              const c10d::AllgatherOptions& opts) override;
  WorkPtr allgather_into_tensor_coalesced(Tensors& outputs, Tensors& inputs,
                                          const c10d::AllgatherOptions& opts) override;
  WorkPtr gather(std::vector<Tensors>& outputs, Tensors& inputs,
                 const c10d::GatherOptions& opts) override;
  WorkPtr scatter(Tensors& outputs, std::vector<Tensors>& inputs,
                  const c10d::ScatterOptions& opts) override;
  WorkPtr reduce_scatter(Tensors& outputs, std::vector<Tensors>& inputs,
                         const c10d::ReduceScatterOptions& opts) override;
  WorkPtr _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                               const c10d::ReduceScatterOptions& opts) override;
  WorkPtr reduce_scatter_tensor_coalesced(Tensors& outputs, Tensors& inputs,
                                          const c10d::ReduceScatterOptions& opts) override;
  WorkPtr alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_splits,
                        std::vector<int64_t>& input_splits,
                        const c10d::AllToAllOptions& opts) override;
  WorkPtr alltoall(Tensors& outputs, Tensors& inputs, const c10d::AllToAllOptions& opts) override;
  WorkPtr send(Tensors& tensors, int dst, int tag) override;
  WorkPtr recv(Tensors& tensors, int src, int tag) override;
  WorkPtr recvAnysource(Tensors& tensors, int tag) override;
  WorkPtr barrier(const c10d::BarrierOptions& opts) override;

 private:
  // A collective: `job` runs on the queue's thread, in call order; the Work's outputs are
  // `outputs` (the caller's tensors, which staged jobs write back to).
  WorkPtr enqueue(c10d::OpType type, Tensors outputs, std::function<void()> job);
  WorkPtr done_now(c10d::OpType type, Tensors tensors);
  // The coalesced forms: one Work over several already enqueued.
  WorkPtr after_all(Tensors outputs, std::vector<WorkPtr> works);
  WorkPtr point_to_point(c10d::OpType type, Tensors& tensors, int peer, int tag);
  // allreduce of a sparse COO tensor: the sum (sparse.cpp).
  WorkPtr sparse_allreduce(Tensors& tensors, const c10d::AllreduceOptions& opts);
  // allreduce's job on one host tensor (also reduce's and allreduce_coalesced's).
  void reduce_in_place(at::Tensor& host, const c10d::ReduceOp& op);
  // Without DTRAIN_ALGO: between 2 ranks on a long link (a round trip of kLongRttSeconds or
  // more) the exchange (armed_all_reduce.h: each sends its whole tensor in one message, one
  // one-way delay, where the ring's two messages wait for two and for the receivers'
  // notices: at 1 Gbit/s + 25 ms PyTorch DDP's cnn ran 1.57x the ring's samples/s side by
  // side); else the ring (on loopback the exchange's whole-tensor copies ran ResNet-18 at
  // 0.88-0.94x gloo).
  comm::Algorithm default_algorithm() const;
  // Whether a link of the group has a round trip of kLongRttSeconds or more.
  bool long_link() const;
  // The ring's segment: 1 MiB where a link is long (segments pipeline the steps across its
  // round trip), 4 MiB elsewhere (on loopback each message's own cost outweighs that: a
  // 128 MiB all-reduce of 2 ranks ran 1.4x faster).
  int64_t segment_bytes() const;
  // Throws naming `what` unless `rank` is a rank of the group.
  void check_rank(int64_t rank, const char* what) const;

  std::unique_ptr<comm::KeyValueStore> store_;
  std::unique_ptr<comm::Group> group_;
  std::optional<comm::Algorithm> algorithm_;  // DTRAIN_ALGO; unset: default_algorithm()
  std::chrono::milliseconds timeout_;
  uint64_t sequence_ = 0;
  std::mutex mutex_;  // the sequence and the queue's submissions
  std::unique_ptr<Waiters> waiters_;
  std::unique_ptr<parallel::BackgroundWorker> queue_;  // last: its jobs use the above
};

}  // namespace dtrain::torch_backend
