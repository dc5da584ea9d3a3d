// allreduce, allreduce_coalesced, reduce and broadcast of the dtrain backend
// (process_group.h): comm's all-reduce (DTRAIN_ALGO; by default the exchange between 2 ranks
// on a long link, else the ring) and broadcast on host tensors.
#include <ATen/ATen.h>

#include <memory>

#include "dtrain/comm/collectives.h"
#include "dtrain/comm/group.h"
#include "dtrain/comm/world.h"
#include "dtrain/torch_backend/process_group.h"
#include "dtrain/torch_backend/staged.h"

namespace dtrain::torch_backend {
const at::Tensor& single(const std::vector<at::Tensor>& tensors, const char* operation) {
  if (tensors.size() != 1)
    throw std::invalid_argument(std::string("dtrain backend: ") + operation +
                                " takes one tensor per call, not " +
                                std::to_string(tensors.size()));
  return tensors[0];
}

comm::ReduceOp comm_op(const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
    case c10d::ReduceOp::PREMUL_SUM:
      return comm::ReduceOp::kSum;
    case c10d::ReduceOp::AVG:
      return comm::ReduceOp::kAvg;
    case c10d::ReduceOp::PRODUCT:
      return comm::ReduceOp::kProduct;
    case c10d::ReduceOp::MIN:
      return comm::ReduceOp::kMin;
    case c10d::ReduceOp::MAX:
      return comm::ReduceOp::kMax;
    case c10d::ReduceOp::BAND:
      return comm::ReduceOp::kBitwiseAnd;
    case c10d::ReduceOp::BOR:
      return comm::ReduceOp::kBitwiseOr;
    case c10d::ReduceOp::BXOR:
      return comm::ReduceOp::kBitwiseXor;
    default:
      break;
  }
  throw std::invalid_argument("dtrain backend: reduce op " +
                              std::to_string(static_cast<int>(op.op_)) + " is not supported");
}

void premultiply(at::Tensor& host, const c10d::ReduceOp& op) {
  if (op.op_ != c10d::ReduceOp::PREMUL_SUM) return;
  const auto* factor = dynamic_cast<const c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
  if (factor == nullptr) throw std::invalid_argument("dtrain backend: PREMUL_SUM without a factor");
  if (factor->tensor_factor.defined())
    host.mul_(factor->tensor_factor.to(host.device()));
  else
    host.mul_(factor->double_factor);
}

void ProcessGroupDtrain::reduce_in_place(at::Tensor& host, const c10d::ReduceOp& op) {
  premultiply(host, op);
  comm::AllReduceOptions o;
  o.op = comm_op(op);
  o.algorithm = all_reduce_algorithm();
  o.segment_bytes = segment_bytes();
  at::Tensor flat = host.view({-1});
  comm::all_reduce(*group_, flat, o);
}

bool ProcessGroupDtrain::long_link() const {
  // Round trips are measured at connect where a link is long (comm/world.h), the same at both
  // ends; elsewhere they read -1.
  return group_->longest_round_trip() >= comm::kLongRttSeconds;
}

comm::Algorithm ProcessGroupDtrain::default_algorithm() const {
  return group_->size() == 2 && long_link() ? comm::Algorithm::kExchange : comm::Algorithm::kRing;
}

int64_t ProcessGroupDtrain::segment_bytes() const {
  return long_link() ? int64_t{1} << 20 : int64_t{4} << 20;
}

ProcessGroupDtrain::WorkPtr ProcessGroupDtrain::allreduce(Tensors& tensors,
                                                          const c10d::AllreduceOptions& opts) {
  const at::Tensor& t = single(tensors, "allreduce");
  if (t.is_sparse()) return sparse_allreduce(tensors, opts);
  comm::check_reduce_op(comm_op(opts.reduceOp), t.scalar_type());
  auto staged = std::make_shared<Staged>(t, /*read=*/true, "allreduce");
  return enqueue(c10d::OpType::ALLREDUCE, tensors, [this, staged, op = opts.reduceOp] {
    reduce_in_place(staged->host(), op);
    staged->write_back();
  });
}

// One all-reduce of the tensors flattened together (one dtype).
ProcessGroupDtrain::WorkPtr ProcessGroupDtrain::allreduce_coalesced(
    Tensors& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  if (tensors.empty())
    throw std::invalid_argument("dtrain backend: allreduce_coalesced of nothing");
  for (const auto& t : tensors) {
    if (t.scalar_type() != tensors[0].scalar_type())
      throw std::invalid_argument("dtrain backend: allreduce_coalesced takes tensors of one dtype");
    if (t.is_sparse())
      throw std::invalid_argument("dtrain backend: allreduce_coalesced of a sparse tensor");
  }
  comm::check_reduce_op(comm_op(opts.reduceOp), tensors[0].scalar_type());
  std::vector<at::Tensor> flat;
  for (const auto& t : tensors)
    flat.push_back(t.reshape({-1}).to(at::kCPU));
  auto joined = std::make_shared<at::Tensor>(at::cat(flat));
  return enqueue(c10d::OpType::ALLREDUCE_COALESCED, tensors,
                 [this, joined, tensors, op = opts.reduceOp]() mutable {
                   reduce_in_place(*joined, op);
                   int64_t at = 0;
                   for (auto& t : tensors) {
                     t.copy_(joined->narrow(0, at, t.numel()).view(t.sizes()));
                     at += t.numel();
                   }
                 });
}

// An all-reduce whose result only the root keeps (the others' tensors stay as they were).
ProcessGroupDtrain::WorkPtr ProcessGroupDtrain::reduce(Tensors& tensors,
                                                       const c10d::ReduceOptions& opts) {
  const at::Tensor& t = single(tensors, "reduce");
  check_rank(opts.rootRank, "reduce to");
  comm::check_reduce_op(comm_op(opts.reduceOp), t.scalar_type());
  const bool root = opts.rootRank == getRank();
  auto staged = std::make_shared<Staged>(root ? t : t.clone(), /*read=*/true, "reduce");
  return enqueue(c10d::OpType::REDUCE, tensors, [this, staged, op = opts.reduceOp] {
    reduce_in_place(staged->host(), op);
    staged->write_back();
  });
}

ProcessGroupDtrain::WorkPtr ProcessGroupDtrain::broadcast(Tensors& tensors,
                                                          const c10d::BroadcastOptions& opts) {
  const at::Tensor& t = single(tensors, "broadcast");
  check_rank(opts.rootRank, "broadcast from");
  auto staged = std::make_shared<Staged>(t, /*read=*/opts.rootRank == getRank(), "broadcast");
  return enqueue(c10d::OpType::BROADCAST, tensors, [this, staged, root = opts.rootRank] {
    at::Tensor flat = staged->host().view({-1});
    comm::broadcast(*group_, flat, static_cast<int>(root));
    staged->write_back();
  });
}

}  // namespace dtrain::torch_backend
