#include "dtrain/comm/armed_all_reduce.h"

#include <ATen/ATen.h>

#include <stdexcept>
#include <string>

#include "dtrain/comm/layout.h"

namespace dtrain::comm {

ArmedAllReduce::ArmedAllReduce(Group& group, int64_t count, int contribution_tag, int reduced_tag,
                               at::ScalarType dtype)
    : group_(group),
      count_(count),
      dtype_(dtype),
      contribution_tag_(contribution_tag),
      reduced_tag_(reduced_tag) {
  if (count < 0) throw std::invalid_argument("armed all-reduce: negative count");
  const int p = group_.size();
  if (p <= 1) return;
  const BlockLayout blocks{count_, p};
  const int64_t own = p == 2 ? count_ : blocks.size(group_.rank());
  contributions_ = at::empty({(p - 1) * own}, dtype_);
  if (p > 2) reduced_ = at::empty({count_ - own}, dtype_);
}

void ArmedAllReduce::arm() {
  const int p = group_.size();
  if (armed_ || p <= 1) {
    armed_ = p > 1;
    return;
  }
  const int r = group_.rank();
  const BlockLayout blocks{count_, p};
  const int64_t own = p == 2 ? count_ : blocks.size(r);
  for (int i = 1; i < p; ++i) {  // contributions in the order peers are staggered below
    const int peer = wrap(r - i, p);
    at::Tensor into = slice(contributions_, (i - 1) * own, own);
    contribution_recvs_.push_back(group_.irecv(into, peer, contribution_tag_));
  }
  if (p > 2) {
    int64_t offset = 0;
    for (int j = 0; j < p; ++j) {
      if (j == r) continue;
      at::Tensor into = slice(reduced_, offset, blocks.size(j));
      reduced_recvs_.push_back(group_.irecv(into, j, reduced_tag_));
      offset += blocks.size(j);
    }
  }
  armed_ = true;
}

namespace {

void check_buffer(const at::Tensor& flat, int64_t count, at::ScalarType dtype) {
  if (flat.scalar_type() != dtype || !flat.device().is_cpu() || !flat.is_contiguous() ||
      flat.numel() != count)
    throw std::invalid_argument("armed all-reduce: needs a contiguous CPU buffer of " +
                                std::to_string(count) + " " + at::toString(dtype) +
                                " values, got " + std::to_string(flat.numel()) + " " +
                                at::toString(flat.scalar_type()));
}

}  // namespace

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
    sends_.push_back(
        group_.isend(p == 2 ? flat : slice(flat, blocks.begin(peer), blocks.size(peer)), peer,
                     contribution_tag_));
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
  const int64_t own_count = p == 2 ? count_ : blocks.size(r);
  at::Tensor own = p == 2 ? flat : slice(flat, blocks.begin(r), own_count);
  std::vector<Request> sends = std::move(sends_);
  sends_.clear();
  // The contribution from rank j sits at place (r - j) mod p - 1 of contributions_.
  auto contribution = [&](int j) {
    return slice(contributions_, (wrap(r - j, p) - 1) * own_count, own_count);
  };
  for (auto& req : contribution_recvs_)
    req.wait();
  contribution_recvs_.clear();
  // Reduce in rank order, so every rank computes the same sums whatever arrived first.
  at::Tensor acc = r == 0 ? own.clone() : contribution(0).clone();
  for (int j = 1; j < p; ++j) {
    combine_into(acc, j == r ? own : contribution(j), op);
  }
  finalize_reduction(acc, op, p);
  // With 2 ranks the send reads all of flat: it must be done before flat changes.
  for (auto& req : sends)
    req.wait();
  sends.clear();
  own.copy_(acc);
  if (p == 2) return;
  for (int j = 0; j < p; ++j)
    if (j != r) sends.push_back(group_.isend(own, j, reduced_tag_));
  for (auto& req : reduced_recvs_)
    req.wait();
  reduced_recvs_.clear();
  int64_t offset = 0;
  for (int j = 0; j < p; ++j) {
    if (j == r) continue;
    slice(flat, blocks.begin(j), blocks.size(j)).copy_(slice(reduced_, offset, blocks.size(j)));
    offset += blocks.size(j);
  }
  for (auto& req : sends)
    req.wait();
}

}  // namespace dtrain::comm
