// Ring all-reduce, segmented and pipelined: each block is cut into K segments; a segment
// is forwarded to the right neighbour as soon as it has been reduced, so reducing segment k
// overlaps the transfer of segments k+1.. and of the next step's segments.
#include <ATen/ATen.h>

#include <algorithm>
#include <vector>

#include "dtrain/comm/algorithms.h"
#include "dtrain/comm/group.h"
#include "dtrain/comm/layout.h"

namespace dtrain::comm::detail {

namespace {

// One rank's view of a segmented ring: which block it sends and receives at each step
// (steps 0..p-2 reduce-scatter, p-1..2p-3 all-gather), and the requests in flight.
class Ring {
 public:
  Ring(Group& group, at::Tensor& flat, int tag, int64_t segment_bytes, bool any_reduce)
      : group_(group),
        flat_(flat),
        tag_(tag),
        p_(group.size()),
        r_(group.rank()),
        blocks_{flat.numel(), p_} {
    const int64_t elem = flat.element_size();
    k_segments_ =
        std::max<int64_t>(1, (blocks_.max_size() * elem + segment_bytes - 1) / segment_bytes);
    slot_len_ = (blocks_.max_size() + k_segments_ - 1) / k_segments_;
    segment_bytes_ = slot_len_ * elem;
    if (any_reduce) staging_ = at::empty({k_segments_ * slot_len_}, flat.options());
    sends_.resize(static_cast<size_t>(p_ * k_segments_));
    recvs_.resize(static_cast<size_t>(k_segments_));
    recv_target_.resize(static_cast<size_t>(k_segments_));
  }

  int64_t segments() const { return k_segments_; }
  bool is_reduce(int s) const { return s < p_ - 1; }
  int send_block(int s) const {
    return is_reduce(s) ? wrap(r_ - s - 1, p_) : wrap(r_ - (s - p_ + 1), p_);
  }
  int recv_block(int s) const {
    return is_reduce(s) ? wrap(r_ - s - 2, p_) : wrap(r_ - (s - p_ + 1) - 1, p_);
  }
  at::Tensor segment(int b, int64_t k) const {
    const BlockLayout segs{blocks_.size(b), k_segments_};
    return slice(flat_, blocks_.begin(b) + segs.begin(k), segs.size(k));
  }

  void post_send(int s, int64_t k) {
    const int b = send_block(s);
    at::Tensor region = segment(b, k);
    if (region.numel() == 0) return;
    auto& slot = sends_[static_cast<size_t>(b * k_segments_ + k)];
    slot.wait();
    slot = group_.isend(region, wrap(r_ + 1, p_), tag_);
  }

  void post_recv(int s, int64_t k) {
    const int b = recv_block(s);
    at::Tensor region = segment(b, k);
    auto& target = recv_target_[static_cast<size_t>(k)];
    if (region.numel() == 0) {
      target = at::Tensor();
      return;
    }
    if (is_reduce(s)) {
      target = slice(staging_, k * slot_len_, region.numel());
    } else {
      sends_[static_cast<size_t>(b * k_segments_ + k)].wait();  // region may still be going out
      target = region;
    }
    recvs_[static_cast<size_t>(k)] = group_.irecv(target, wrap(r_ - 1, p_), tag_);
  }

  // Posts step s's receives and sends (post_exchange() orders them), every segment (the
  // first step) or one (the later steps, as their segments are ready).
  void post_step(int s) {
    post_exchange(
        segment_bytes_,
        [&] {
          for (int64_t k = 0; k < k_segments_; ++k)
            post_recv(s, k);
        },
        [&] {
          for (int64_t k = 0; k < k_segments_; ++k)
            post_send(s, k);
        });
  }
  void post_segment(int s, int64_t k) {
    post_exchange(
        segment_bytes_, [&] { post_recv(s, k); }, [&] { post_send(s, k); });
  }

  // Waits for segment k of step s; returns what arrived into staging (reduce steps) or an
  // undefined tensor (nothing to combine).
  at::Tensor receive(int s, int64_t k) {
    recvs_[static_cast<size_t>(k)].wait();
    return is_reduce(s) ? recv_target_[static_cast<size_t>(k)] : at::Tensor();
  }

  void wait_sends() {
    for (auto& req : sends_)
      req.wait();
  }

 private:
  Group& group_;
  at::Tensor& flat_;
  const int tag_, p_, r_;
  const BlockLayout blocks_;
  int64_t k_segments_ = 1, slot_len_ = 0, segment_bytes_ = 0;
  at::Tensor staging_;
  std::vector<Request> sends_, recvs_;
  std::vector<at::Tensor> recv_target_;
};

}  // namespace

void ring_steps(Group& group, at::Tensor& flat, ReduceOp op, int tag, int64_t segment_bytes,
                int first_step, int end_step) {
  const int p = group.size();
  if (p == 1) {
    if (first_step == 0) finalize_reduction(flat, op, 1);
    return;
  }
  Ring ring(group, flat, tag, segment_bytes, first_step < p - 1);
  const int64_t k_segments = ring.segments();
  ring.post_step(first_step);
  for (int s = first_step; s < end_step; ++s) {
    const int b = ring.recv_block(s);
    for (int64_t k = 0; k < k_segments; ++k) {
      const at::Tensor arrived = ring.receive(s, k);
      if (arrived.defined()) {
        at::Tensor region = ring.segment(b, k);
        combine_into(region, arrived, op);
        if (s == p - 2) finalize_reduction(region, op, p);
      }
      if (s + 1 < end_step) ring.post_segment(s + 1, k);
    }
  }
  ring.wait_sends();
}

void ring_all_reduce(Group& group, at::Tensor& flat, ReduceOp op, int tag, int64_t segment_bytes) {
  ring_steps(group, flat, op, tag, segment_bytes, 0, 2 * group.size() - 2);
}

}  // namespace dtrain::comm::detail
