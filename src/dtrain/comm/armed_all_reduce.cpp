#include "dtrain/comm/armed_all_reduce.h"

#include <ATen/ATen.h>

#include <stdexcept>
#include <string>

#include "dtrain/comm/layout.h"

namespace dtrain::comm {

namespace {

int64_t own_count(const Group& group, int64_t count) {
  const int p = group.size();
  return p == 2 ? count : BlockLayout{count, p}.size(group.rank());
}

void check_buffer(const at::Tensor& flat, int64_t count, at::ScalarType dtype) {
  if (flat.scalar_type() != dtype || !flat.device().is_cpu() || !flat.is_contiguous() ||
      flat.numel() != count)
    throw std::invalid_argument("armed all-reduce: needs a contiguous CPU buffer of " +
                                std::to_string(count) + " " + at::toString(dtype) +
                                " values, got " + std::to_string(flat.numel()) + " " +
                                at::toString(flat.scalar_type()));
}

}  // namespace

ArmedAllReduce::ArmedAllReduce(Group& group, int64_t count, int contribution_tag, int reduced_tag,
                               at::ScalarType dtype)
    : group_(group),
      count_(count),
      dtype_(dtype),
      contribution_tag_(contribution_tag),
      reduced_tag_(reduced_tag),
      own_(count < 0 ? 0 : own_count(group, count)) {
  if (count < 0) throw std::invalid_argument("armed all-reduce: negative count");
  const int p = group_.size();
  if (p <= 1) return;
  const int64_t contributions = (p - 1) * own_;
  const int64_t reduced = p > 2 ? count_ - own_ : 0;
  const int64_t values = contributions + own_ + reduced;
  scratch_ = group_.take_scratch(values * at::elementSize(dtype_));
  const at::Tensor all = scratch_.narrow(0, 0, values * at::elementSize(dtype_)).view(dtype_);
  contributions_ = all.narrow(0, 0, contributions);
  sum_ = all.narrow(0, contributions, own_);
  reduced_ = all.narrow(0, contributions + own_, reduced);
}

ArmedAllReduce::~ArmedAllReduce() {
  const auto busy = [](const std::vector<Request>& requests) {
    for (const auto& r : requests)
      if (r.pending()) return true;
    return false;
  };
  if (scratch_.defined() && !busy(contribution_recvs_) && !busy(reduced_recvs_) && !busy(sends_))
    group_.give_back_scratch(std::move(scratch_));
}

at::Tensor ArmedAllReduce::reduced_block(int j) const {
  const BlockLayout blocks{count_, group_.size()};
  // reduced_ holds every block but this rank's, in rank order.
  const int64_t begin = blocks.begin(j) - (j > group_.rank() ? own_ : 0);
  return slice(reduced_, begin, blocks.size(j));
}

void ArmedAllReduce::arm() {
  const int p = group_.size();
  if (armed_ || p <= 1) return;
  const int r = group_.rank();
  for (int i = 1; i < p; ++i) {  // contributions in the order peers are staggered below
    const int peer = wrap(r - i, p);
    at::Tensor into = slice(contributions_, (i - 1) * own_, own_);
    group_.irecv_opening_first(into, peer, contribution_tag_, contribution_recvs_);
  }
  if (p > 2) {
    for (int j = 0; j < p; ++j) {
      if (j == r) continue;
      at::Tensor into = reduced_block(j);
      group_.irecv_opening_first(into, j, reduced_tag_, reduced_recvs_);
    }
  }
  armed_ = true;
}

void ArmedAllReduce::run(at::Tensor& flat, ReduceOp op) {
  start(flat);
  finish(flat, op);
}

void ArmedAllReduce::start(const at::Tensor& flat) {
  check_buffer(flat, count_, dtype_);
  if (started_) throw std::logic_error("armed all-reduce: started twice without finish()");
  const int p = group_.size();
  started_ = true;
  if (p == 1) return;
  arm();
  armed_ = false;
  const int r = group_.rank();
  const BlockLayout blocks{count_, p};
  for (int i = 1; i < p; ++i) {  // staggered so rank j is not everyone's first target
    const int peer = wrap(r + i, p);
    group_.isend_opening_first(p == 2 ? flat : slice(flat, blocks.begin(peer), blocks.size(peer)),
                               peer, contribution_tag_, sends_);
  }
}

void ArmedAllReduce::finish(at::Tensor& flat, ReduceOp op) {
  if (!started_) start(flat);
  check_buffer(flat, count_, dtype_);
  started_ = false;
  const int p = group_.size();
  const int r = group_.rank();
  if (p == 1) {
    finalize_reduction(flat, op, 1);
    return;
  }
  const BlockLayout blocks{count_, p};
  at::Tensor own = p == 2 ? flat : slice(flat, blocks.begin(r), own_);
  std::vector<Request> sends = std::move(sends_);
  sends_.clear();
  // The contribution from rank j sits at place (r - j) mod p - 1 of contributions_.
  auto contribution = [&](int j) {
    return slice(contributions_, (wrap(r - j, p) - 1) * own_, own_);
  };
  for (auto& req : contribution_recvs_)
    req.wait();
  contribution_recvs_.clear();
  // Sum in rank order, so every rank computes the same sums whatever arrived first.
  sum_.copy_(r == 0 ? own : contribution(0));
  for (int j = 1; j < p; ++j) {
    combine_into(sum_, j == r ? own : contribution(j), op);
  }
  finalize_reduction(sum_, op, p);
  // With 2 ranks the send reads all of flat: it must be done before flat changes.
  for (auto& req : sends)
    req.wait();
  sends.clear();
  own.copy_(sum_);
  if (p == 2) return;
  for (int j = 0; j < p; ++j)
    if (j != r) group_.isend_opening_first(own, j, reduced_tag_, sends);
  for (auto& req : reduced_recvs_)
    req.wait();
  reduced_recvs_.clear();
  for (int j = 0; j < p; ++j)
    if (j != r) slice(flat, blocks.begin(j), blocks.size(j)).copy_(reduced_block(j));
  for (auto& req : sends)
    req.wait();
}

}  // namespace dtrain::comm
