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

void ring_steps(Group& group, at::Tensor& flat, ReduceOp op, int tag, int64_t segment_bytes,
                int first_step, int end_step) {
  const int p = group.size();
  const int r = group.rank();
  if (p == 1) {
    if (first_step == 0) finalize_reduction(flat, op, 1);
    return;
  }
  const int left = wrap(r - 1, p);
  const int right = wrap(r + 1, p);
  const BlockLayout blocks{flat.numel(), p};
  const int64_t elem = flat.element_size();
  const int64_t k_segments =
      std::max<int64_t>(1, (blocks.max_size() * elem + segment_bytes - 1) / segment_bytes);
  const int64_t slot_len = (blocks.max_size() + k_segments - 1) / k_segments;

  auto is_reduce = [&](int s) { return s < p - 1; };
  auto send_block = [&](int s) {
    return is_reduce(s) ? wrap(r - s - 1, p) : wrap(r - (s - p + 1), p);
  };
  auto recv_block = [&](int s) {
    return is_reduce(s) ? wrap(r - s - 2, p) : wrap(r - (s - p + 1) - 1, p);
  };
  auto segment = [&](int b, int64_t k) {
    const BlockLayout segs{blocks.size(b), k_segments};
    return slice(flat, blocks.begin(b) + segs.begin(k), segs.size(k));
  };

  const bool any_reduce = first_step < p - 1;
  at::Tensor staging =
      any_reduce ? at::empty({k_segments * slot_len}, flat.options()) : at::Tensor();
  std::vector<Request> sends(static_cast<size_t>(p * k_segments));
  std::vector<Request> recvs(static_cast<size_t>(k_segments));
  std::vector<at::Tensor> recv_target(static_cast<size_t>(k_segments));

  auto post_send = [&](int s, int64_t k) {
    const int b = send_block(s);
    at::Tensor region = segment(b, k);
    if (region.numel() == 0) return;
    auto& slot = sends[static_cast<size_t>(b * k_segments + k)];
    slot.wait();
    slot = group.isend(region, right, tag);
  };
  auto post_recv = [&](int s, int64_t k) {
    const int b = recv_block(s);
    at::Tensor region = segment(b, k);
    auto& target = recv_target[static_cast<size_t>(k)];
    if (region.numel() == 0) {
      target = at::Tensor();
      return;
    }
    if (is_reduce(s)) {
      target = slice(staging, k * slot_len, region.numel());
    } else {
      sends[static_cast<size_t>(b * k_segments + k)].wait();  // region may still be going out
      target = region;
    }
    recvs[static_cast<size_t>(k)] = group.irecv(target, left, tag);
  };

  for (int64_t k = 0; k < k_segments; ++k)
    post_send(first_step, k);
  for (int64_t k = 0; k < k_segments; ++k)
    post_recv(first_step, k);
  for (int s = first_step; s < end_step; ++s) {
    const int b = recv_block(s);
    for (int64_t k = 0; k < k_segments; ++k) {
      recvs[static_cast<size_t>(k)].wait();
      if (is_reduce(s) && recv_target[static_cast<size_t>(k)].defined()) {
        at::Tensor region = segment(b, k);
        combine_into(region, recv_target[static_cast<size_t>(k)], op);
        if (s == p - 2) finalize_reduction(region, op, p);
      }
      if (s + 1 < end_step) {
        post_send(s + 1, k);
        post_recv(s + 1, k);
      }
    }
  }
  for (auto& req : sends)
    req.wait();
}

void ring_all_reduce(Group& group, at::Tensor& flat, ReduceOp op, int tag, int64_t segment_bytes) {
  ring_steps(group, flat, op, tag, segment_bytes, 0, 2 * group.size() - 2);
}

}  // namespace dtrain::comm::detail
