// The Work a dtrain backend operation returns (torch_backend/backend.h): done once the
// operation's job calls complete() or fail(); its future then holds the output tensors (or
// the error), and wait() returns (or throws it).
#pragma once

#include <torch/csrc/distributed/c10d/Work.hpp>

#include <exception>
#include <vector>

namespace dtrain::torch_backend {

class BackendWork final : public c10d::Work {
 public:
  BackendWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs, uint64_t sequence);

  void complete();
  void fail(std::exception_ptr error);

  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  uint64_t getSequencenumber() const override { return sequence_; }
  // A receive's sender (torch's Work._source_rank()), set before complete().
  int sourceRank() const override { return source_; }
  void set_source(int rank) { source_ = rank; }

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  uint64_t sequence_;
  int source_ = -1;
};

}  // namespace dtrain::torch_backend
