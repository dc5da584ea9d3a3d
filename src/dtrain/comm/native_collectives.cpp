// Group's collectives through the backend's own algorithms (Gloo's, or NCCL's for the
// tensors on the GPU it serves): bookkeeping reductions and the `native` algorithm.
#include <ATen/ATen.h>

#include <chrono>
#include <sstream>
#include <string>
#include <vector>

#include "dtrain/comm/backend.h"
#include "dtrain/comm/error.h"
#include "dtrain/comm/group.h"

namespace dtrain::comm {

void Group::barrier() {
  // A tiny all-reduce is a barrier that honours our timeout and error wording.
  auto t = at::zeros({1}, at::kInt);
  native_all_reduce(t, ReduceOp::kSum);
}

namespace {
c10d::ReduceOp to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return c10d::ReduceOp::SUM;
    case ReduceOp::kProduct:
      return c10d::ReduceOp::PRODUCT;
    case ReduceOp::kMin:
      return c10d::ReduceOp::MIN;
    case ReduceOp::kMax:
      return c10d::ReduceOp::MAX;
    case ReduceOp::kBitwiseAnd:
      return c10d::ReduceOp::BAND;
    case ReduceOp::kBitwiseOr:
      return c10d::ReduceOp::BOR;
    case ReduceOp::kBitwiseXor:
      return c10d::ReduceOp::BXOR;
  }
  return c10d::ReduceOp::SUM;
}
}  // namespace

bool Group::reduces_on_device(const at::Tensor& tensor) const {
  return backend_->device_pg && tensor.device() == backend_->device;
}

namespace {
// What a native collective runs on: the tensor itself where the backend reads it (host
// memory for Gloo, its GPU for NCCL; any dense layout, channels-last included, since every
// rank has the same), else a copy there, which the caller copies back.
at::Tensor collective_buffer(const at::Tensor& tensor, bool on_device) {
  const at::Tensor there = on_device ? tensor : tensor.to(at::kCPU);
  return tensor.scalar_type() == at::kBFloat16 ? there.to(at::kFloat) : there;
}
}  // namespace

template <typename Collective>
void Group::run_native(const char* what, Collective&& collective) {
  const auto start = std::chrono::steady_clock::now();
  try {
    collective();
  } catch (const std::exception& e) {
    const std::string error = e.what();
    const std::chrono::duration<double> waited = std::chrono::steady_clock::now() - start;
    std::ostringstream msg;
    msg.precision(3);
    msg << describe() << ": native " << what << " failed after " << waited.count()
        << " s: " << error.substr(0, error.find('\n'));
    // An elastic group's failures are its membership's to explain (elastic/).
    if (owner_explains_failures()) throw CommError(msg.str());
    // Published before the peers are read, so ranks failing together see each other's.
    publish_failure(msg.str());
    const std::string note = silent_peers_note();
    throw CommError(msg.str() + (note.empty() ? " -- a peer may have exited or crashed; see the "
                                                "other ranks' output"
                                              : note));
  }
}

void Group::native_all_reduce(at::Tensor& tensor, ReduceOp op) {
  if (size_ == 1 || tensor.numel() == 0) {
    return;
  }
  const bool on_device = reduces_on_device(tensor);
  // Gloo reduces host memory: a tensor elsewhere (CUDA) goes through a host copy. bfloat16
  // is reduced in float32 and rounded once: summing p values in bfloat16 would round at
  // every step (and Gloo in older LibTorch had no bfloat16 reduction at all).
  std::vector<at::Tensor> bufs{collective_buffer(tensor, on_device)};
  c10d::AllreduceOptions opts;
  opts.reduceOp = to_c10d(op);
  opts.timeout = timeout_;
  auto& pg = on_device ? backend_->device_pg : backend_->pg;
  run_native("all_reduce", [&] { pg->allreduce(bufs, opts)->wait(timeout_); });
  finalize_reduction(bufs[0], op, size_);
  if (!bufs[0].is_same(tensor)) tensor.copy_(bufs[0]);
}

void Group::native_broadcast(at::Tensor& tensor, int root) {
  if (size_ == 1 || tensor.numel() == 0) return;
  const bool on_device = reduces_on_device(tensor);
  std::vector<at::Tensor> bufs{collective_buffer(tensor, on_device)};  // as native_all_reduce
  c10d::BroadcastOptions opts;
  opts.rootRank = root;
  opts.timeout = timeout_;
  auto& pg = on_device ? backend_->device_pg : backend_->pg;
  run_native("broadcast", [&] { pg->broadcast(bufs, opts)->wait(timeout_); });
  if (!bufs[0].is_same(tensor)) tensor.copy_(bufs[0]);
}

}  // namespace dtrain::comm
