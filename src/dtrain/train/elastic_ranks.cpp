#include "dtrain/train/elastic_ranks.h"

#include <torch/torch.h>

#include <algorithm>
#include <map>

#include "dtrain/comm/group.h"
#include "dtrain/comm/small_message.h"
#include "dtrain/parallel/exact_mean.h"
#include "dtrain/train/engine.h"
#include "dtrain/train/inner_state.h"

namespace dtrain::train {
namespace {

constexpr int64_t kPlanFields = 7;
constexpr int64_t kMaxCount = int64_t{1} << 53;
constexpr int64_t kMaxPositions = int64_t{1} << 40;

}  // namespace

RankSlice rank_slice(const std::vector<int64_t>& share, int place, int ranks, int64_t batch_size) {
  RankSlice slice;
  const auto n = static_cast<int64_t>(share.size());
  const int64_t per_step = batch_size * ranks;
  slice.steps = (n + per_step - 1) / per_step;
  for (int64_t step = 0; step < slice.steps; ++step) {
    const int64_t begin = step * per_step, m = std::min(per_step, n - begin);
    // Part `place` of m positions in `ranks` parts: the first m % ranks parts one larger.
    const int64_t base = m / ranks, extra = m % ranks;
    const int64_t from = begin + place * base + std::min<int64_t>(place, extra);
    const int64_t size = base + (place < extra ? 1 : 0);
    if (size == 0) {
      slice.positions.push_back(share[static_cast<size_t>(begin)]);
      slice.filler = true;
      continue;
    }
    slice.positions.insert(slice.positions.end(), share.begin() + from,
                           share.begin() + from + size);
  }
  return slice;
}

bool ReplicaRanks::leader() const {
  return group_.rank() == 0;
}
int ReplicaRanks::place() const {
  return group_.rank();
}
int ReplicaRanks::size() const {
  return group_.size();
}

RoundPlan ReplicaRanks::share_plan(const RoundPlan& plan) {
  // The plan's fields cross as one small message, its positions after it.
  at::Tensor words = comm::MessageWriter()
                         .flag(plan.finished)
                         .count(plan.epoch)
                         .count(plan.round)
                         .count(plan.share_index)
                         .count(plan.resets)
                         .count(static_cast<int64_t>(plan.positions.size()))
                         .real(plan.lr)
                         .finish();
  group_.native_broadcast(words, 0);
  comm::MessageReader in(words, kPlanFields, "elastic round plan from the replica's leader");
  RoundPlan shared;
  shared.finished = in.flag("finished");
  shared.epoch = in.count(0, kMaxCount, "epoch");
  shared.round = in.count(0, kMaxCount, "round");
  shared.share_index = in.count(0, kMaxCount, "share index");
  shared.resets = in.count(0, kMaxCount, "resets");
  const int64_t positions_count = in.count(0, kMaxPositions, "positions");
  shared.lr = in.real();
  at::Tensor positions = leader() ? at::tensor(plan.positions, at::kLong).clone()
                                  : at::empty({positions_count}, at::kLong);
  if (positions_count > 0) group_.native_broadcast(positions, 0);
  const auto* p = positions.data_ptr<int64_t>();
  shared.positions.assign(p, p + positions_count);
  return shared;
}

void ReplicaRanks::share_state(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  // One broadcast per element type (a ResNet's 100 and more tensors in two), through a flat
  // host copy: the leader's values, a follower's receive buffer.
  std::map<at::ScalarType, std::vector<at::Tensor>> by_type;
  for (const at::Tensor& p : module.parameters())
    by_type[p.scalar_type()].push_back(p.detach());
  for (const at::Tensor& b : module.buffers())
    by_type[b.scalar_type()].push_back(b);
  for (const auto& [type, tensors] : by_type) {
    int64_t values = 0;
    std::vector<at::Tensor> parts;
    for (const at::Tensor& t : tensors) {
      values += t.numel();
      if (leader()) parts.push_back(t.to(at::kCPU).reshape({-1}));
    }
    if (values == 0) continue;
    at::Tensor flat = leader() ? at::cat(parts) : at::empty({values}, at::TensorOptions(type));
    group_.native_broadcast(flat, 0);
    if (!leader()) parallel::copy_from_flat(flat, tensors);
  }
}

void ReplicaRanks::share_inner(torch::optim::Optimizer& optimizer) {
  at::Tensor state = leader() ? pack_inner_state(optimizer)
                              : at::empty({inner_state_values(optimizer)}, at::kFloat);
  if (state.numel() == 0) return;
  group_.native_broadcast(state, 0);
  if (!leader()) unpack_inner_state(optimizer, state);
}

ReplicaRanks::Vote ReplicaRanks::vote(bool go, bool changed) {
  at::Tensor votes =
      at::tensor({go ? int64_t{0} : int64_t{1}, changed ? int64_t{1} : int64_t{0}}, at::kLong);
  group_.native_all_reduce(votes, comm::ReduceOp::kSum);
  return {votes[0].item<int64_t>() == 0, votes[1].item<int64_t>() != 0};
}

void ReplicaRanks::sum(std::vector<double>& values) {
  sum_over_group(group_, values);
}

}  // namespace dtrain::train
