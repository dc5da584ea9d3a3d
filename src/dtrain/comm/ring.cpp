// Ring all-reduce, segmented and pipelined: each block is cut into K segments; a segment
// is forwarded to the right neighbour as soon as it has been reduced, so reducing segment k
// overlaps the transfer of segments k+1.. and of the next step's segments.
//
// The wire check is fused (fused_reduce.h): a reduce step checksums what arrived and what
// it produced in the pass that adds them, and the sum's CRC goes with it to the next rank;
// a gather step checksums what arrived once, and forwards it with that CRC. Only the
// rank's own first block costs a pass of its own, made while its segments cross (the check
// follows the payload), and no segment is copied into a frame.
//
// On a link with openings (group.h) the first step's first segments, up to the opening's
// capacity, go as one opening: their receive was posted before the call, so they leave at
// once, where every other message waits for its receive's notice to cross the link.
//
// Look-ahead (ring_looks_ahead, algorithms.h: p > 2, a long link from the left neighbour,
// blocks of at most 8 MiB): each step's receives are posted a step early, as the step before
// them begins, so their notices cross the link while that step's data is on its way and the
// sender finds them there as it reduces; posted with the step, each of the 2p - 3 later
// steps began one one-way delay late where a step's data crosses within a round trip. A
// reduce step then has staging of its own beside the step before it (twice the staging).
// Both ends still post a tag's messages step by step, segment by segment, the order in
// which Gloo pairs receives with sends.
#include <ATen/ATen.h>

#include <algorithm>
#include <optional>
#include <vector>

#include "dtrain/base/crc32c.h"
#include "dtrain/comm/algorithms.h"
#include "dtrain/comm/fused_reduce.h"
#include "dtrain/comm/group.h"
#include "dtrain/comm/layout.h"
#include "dtrain/comm/tags.h"
#include "dtrain/comm/world.h"

namespace dtrain::comm::detail {

namespace {

// One rank's view of a segmented ring: which block it sends and receives at each step
// (steps 0..p-2 reduce-scatter, p-1..2p-3 all-gather), and the requests in flight.
class Ring {
 public:
  Ring(Group& group, at::Tensor& flat, int tag, int64_t segment_bytes, int first_step, int end_step)
      : group_(group),
        flat_(flat),
        tag_(tag),
        p_(group.size()),
        r_(group.rank()),
        first_step_(first_step),
        end_step_(end_step),
        blocks_{flat.numel(), p_},
        look_ahead_(ring_looks_ahead(group, blocks_.max_size() * flat.element_size())) {
    const int64_t elem = flat.element_size();
    k_segments_ =
        std::max<int64_t>(1, (blocks_.max_size() * elem + segment_bytes - 1) / segment_bytes);
    slot_len_ = (blocks_.max_size() + k_segments_ - 1) / k_segments_;
    segment_bytes_ = slot_len_ * elem;
    if (has_opening_tags(tag)) {  // both ends of a link count alike: same block, same capacity
      opened_sends_ = opened_segments(send_block(first_step), wrap(r_ + 1, p_));
      opened_recvs_ = opened_segments(recv_block(first_step), wrap(r_ - 1, p_));
    }
    const int64_t slots = (look_ahead_ ? 2 : 1) * k_segments_;
    const int64_t staging_bytes = slots * slot_len_ * elem;
    const int64_t opening_len = opened_len(recv_block(first_step), opened_recvs_);
    if (is_reduce(first_step)) {
      scratch_ = group.take_scratch(staging_bytes + opening_len * elem);
      staging_ = scratch_.narrow(0, 0, staging_bytes).view(flat.scalar_type());
      // A reduce step's opening lands beside the staging (segment k of it where the
      // segments' own offsets in the block say).
      if (opening_len > 0)
        opening_target_ =
            scratch_.narrow(0, staging_bytes, opening_len * elem).view(flat.scalar_type());
    } else if (opening_len > 0) {  // a gather step's lands where the block lies
      opening_target_ = slice(flat_, blocks_.begin(recv_block(first_step)), opening_len);
    }
    sends_.resize(static_cast<size_t>(p_ * k_segments_));
    recvs_.resize(static_cast<size_t>(slots));
    recv_target_.resize(static_cast<size_t>(slots));
    crcs_.resize(static_cast<size_t>(p_ * k_segments_));
  }

  ~Ring() {
    try {  // the sends read `flat`, and the receives write staging: both end before it goes
      wait_sends();
      opening_recv_.wait();
    } catch (...) {  // a failed collective: its error is already on its way up
    }
    if (scratch_.defined()) group_.give_back_scratch(std::move(scratch_));
  }
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;

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
    if (s == first_step_ && k < opened_sends_) return;  // in the opening
    at::Tensor region = segment(b, k);
    if (region.numel() == 0) return;
    const size_t at = static_cast<size_t>(b * k_segments_ + k);
    auto& slot = sends_[at];
    slot.wait();
    // The rank's own data, sent as it is, costs the one extra pass: without a CRC the
    // group computes it after posting the payload, while the payload crosses.
    slot = group_.isend_checked(region, wrap(r_ + 1, p_), tag_, crcs_[at]);
  }

  // Completes segment k of step s: combines what arrived into the block (a reduce step) or
  // takes it as it is (a gather step), checking it against its sender's CRC in the same pass,
  // and keeps the result's CRC for the send that forwards it.
  void complete(int s, int64_t k, ReduceOp op) {
    const bool opened = s == first_step_ && k < opened_recvs_;  // checked as it was taken
    auto& request = opened ? opening_recv_ : recvs_[slot(s, k)];
    request.wait();
    const int b = recv_block(s);
    at::Tensor region = segment(b, k);
    if (region.numel() == 0) return;
    auto& crc = crcs_[static_cast<size_t>(b * k_segments_ + k)];
    const int finalize = s == p_ - 2 ? p_ : 0;
    if (is_reduce(s)) {
      const at::Tensor& arrived = recv_target_[slot(s, k)];
      if (checked_) {
        const ReduceCrcs crcs = combine_with_crcs(region, arrived, op, finalize);
        if (!opened) group_.verify_deferred(request, crcs.in);
        crc = crcs.out;
      } else {
        combine_into(region, arrived, op);
        if (finalize > 0) finalize_reduction(region, op, finalize);
      }
    } else if (checked_) {
      crc = crc32c(region.data_ptr(), static_cast<size_t>(region.nbytes()));
      if (!opened) group_.verify_deferred(request, *crc);
    }
  }

  void post_recv(int s, int64_t k) {
    const int b = recv_block(s);
    at::Tensor region = segment(b, k);
    auto& target = recv_target_[slot(s, k)];
    if (region.numel() == 0) {
      target = at::Tensor();
      return;
    }
    if (s == first_step_ && k < opened_recvs_) {  // in the opening
      const BlockLayout segs{blocks_.size(b), k_segments_};
      target = slice(opening_target_, segs.begin(k), region.numel());
      return;
    }
    if (is_reduce(s)) {
      target = slice(staging_, static_cast<int64_t>(slot(s, k)) * slot_len_, region.numel());
    } else {
      sends_[static_cast<size_t>(b * k_segments_ + k)].wait();  // region may still be going out
      if (b == send_block(first_step_) && k < opened_sends_) opening_send_.wait();
      target = region;
    }
    recvs_[slot(s, k)] = group_.irecv_deferred(target, wrap(r_ - 1, p_), tag_);
  }

  // Posts the first step's receives and sends (post_exchange() orders them), every segment,
  // and with look-ahead the next step's receives too.
  void post_first_step() {
    const int s = first_step_;
    post_exchange(
        segment_bytes_,
        [&] {
          if (opening_target_.defined())
            opening_recv_ = group_.irecv_opening(opening_target_, wrap(r_ - 1, p_), tag_);
          for (int64_t k = 0; k < k_segments_; ++k)
            post_recv(s, k);
          if (look_ahead_ && s + 1 < end_step_) {
            for (int64_t k = 0; k < k_segments_; ++k)
              post_recv(s + 1, k);
          }
        },
        [&] {
          const int b = send_block(s);
          const int64_t len = opened_len(b, opened_sends_);
          if (len > 0)
            opening_send_ =
                group_.isend_opening(slice(flat_, blocks_.begin(b), len), wrap(r_ + 1, p_), tag_);
          for (int64_t k = 0; k < k_segments_; ++k)
            post_send(s, k);
        });
  }
  // Segment k of a later step s, once it is ready: its send, and the receive of step s (or of
  // step s + 1, with look-ahead).
  void post_segment(int s, int64_t k) {
    const int receive_step = look_ahead_ ? s + 1 : s;
    post_exchange(
        segment_bytes_,
        [&] {
          if (receive_step < end_step_) post_recv(receive_step, k);
        },
        [&] { post_send(s, k); });
  }

  void wait_sends() {
    opening_send_.wait();
    for (auto& req : sends_)
      req.wait();
  }

 private:
  // How many of block b's first segments fit the openings of the link to `peer` (0 where it
  // has none), and how many elements they hold.
  int64_t opened_segments(int b, int peer) const {
    const int64_t capacity = group_.opening_capacity(peer);
    if (capacity == 0) return 0;
    const BlockLayout segs{blocks_.size(b), k_segments_};
    int64_t k = 0;
    while (k < k_segments_ && (segs.begin(k) + segs.size(k)) * flat_.element_size() <= capacity)
      ++k;
    return k;
  }
  // Where segment k of step s has its receive and staging.
  size_t slot(int s, int64_t k) const {
    return static_cast<size_t>((look_ahead_ ? (s - first_step_) % 2 * k_segments_ : 0) + k);
  }
  int64_t opened_len(int b, int64_t segments) const {
    const BlockLayout segs{blocks_.size(b), k_segments_};
    return segments == 0 ? 0 : segs.begin(segments - 1) + segs.size(segments - 1);
  }

  Group& group_;
  at::Tensor& flat_;
  const int tag_, p_, r_, first_step_, end_step_;
  const BlockLayout blocks_;
  const bool look_ahead_;
  // The first step's opening: how many segments it carries each way, where it lands, and
  // its requests.
  int64_t opened_sends_ = 0, opened_recvs_ = 0;
  at::Tensor opening_target_;
  Request opening_send_, opening_recv_;
  int64_t k_segments_ = 1, slot_len_ = 0, segment_bytes_ = 0;
  at::Tensor scratch_, staging_;
  std::vector<Request> sends_, recvs_;
  std::vector<at::Tensor> recv_target_;
  const bool checked_ = group_.wire_check();
  std::vector<std::optional<uint32_t>> crcs_;  // per (block, segment): of what it holds now
};

}  // namespace

bool ring_looks_ahead(const Group& group, int64_t block_bytes) {
  const int p = group.size();
  return p > 2 && block_bytes <= kRingLookAheadMaxBytes &&
         group.round_trip(wrap(group.rank() - 1, p)) >= kLongRttSeconds;
}

void ring_steps(Group& group, at::Tensor& flat, ReduceOp op, int tag, int64_t segment_bytes,
                int first_step, int end_step) {
  const int p = group.size();
  if (p == 1) {
    if (first_step == 0) finalize_reduction(flat, op, 1);
    return;
  }
  Ring ring(group, flat, tag, segment_bytes, first_step, end_step);
  const int64_t k_segments = ring.segments();
  ring.post_first_step();
  for (int s = first_step; s < end_step; ++s) {
    for (int64_t k = 0; k < k_segments; ++k) {
      ring.complete(s, k, op);
      if (s + 1 < end_step) ring.post_segment(s + 1, k);
    }
  }
  ring.wait_sends();
}

void ring_all_reduce(Group& group, at::Tensor& flat, ReduceOp op, int tag, int64_t segment_bytes) {
  ring_steps(group, flat, op, tag, segment_bytes, 0, 2 * group.size() - 2);
}

}  // namespace dtrain::comm::detail
