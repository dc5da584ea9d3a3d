#include "dtrain/comm/collectives.h"

#include <ATen/ATen.h>

#include <stdexcept>
#include <vector>

#include "dtrain/comm/algorithms.h"
#include "dtrain/comm/group.h"
#include "dtrain/comm/layout.h"
#include "dtrain/comm/tags.h"

namespace dtrain::comm {
namespace {

constexpr int64_t kSegmentBytes = 512 * 1024;
constexpr int64_t kTreeMaxBytes = 256 * 1024;
const int kBroadcastTag = collective_tag(CollectiveChannel::kBroadcast);
const int kScatterGatherTag = collective_tag(CollectiveChannel::kScatterGather);

at::Tensor flat_view(Group& group, const at::Tensor& t, const char* what) {
  if (!t.device().is_cpu() || !t.is_contiguous()) {
    throw std::invalid_argument(group.describe() + ": " + what + " needs a contiguous CPU tensor");
  }
  return t.view({-1});
}

void check_count(Group& group, const at::Tensor& t, int64_t expected, const char* what) {
  if (t.numel() != expected) {
    throw std::invalid_argument(group.describe() + ": " + what + " expects " +
                                std::to_string(expected) + " elements, got " +
                                std::to_string(t.numel()));
  }
}

// Binomial tree rooted at `root`: a rank receives once from its parent, then sends to its
// children in decreasing subtree size; log2(p) rounds. Each message is an opening where its
// link has them (group.h): a round then costs one one-way delay, not a round trip more.
void binomial_broadcast(Group& group, at::Tensor& flat, int root) {
  const int p = group.size();
  const int v = wrap(group.rank() - root, p);
  int mask = 1;
  while (mask < p) {
    if (v & mask) {
      group.irecv_opening_if_fits(flat, wrap(v - mask + root, p), kBroadcastTag).wait();
      break;
    }
    mask <<= 1;
  }
  std::vector<Request> sends;
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (v + mask < p)
      sends.push_back(group.isend_opening_if_fits(flat, wrap(v + mask + root, p), kBroadcastTag));
  }
  for (auto& s : sends)
    s.wait();
}

// Root sends block j to rank j, then a ring all-gather: the root's link carries n(p-1)/p
// instead of n(p-1) as in a flat broadcast.
void scatter_all_gather_broadcast(Group& group, at::Tensor& flat, int root) {
  const int p = group.size();
  const int r = group.rank();
  const BlockLayout blocks{flat.numel(), p};
  if (r == root) {
    std::vector<Request> sends;
    for (int j = 0; j < p; ++j) {
      if (j == r || blocks.size(j) == 0) continue;
      sends.push_back(
          group.isend(slice(flat, blocks.begin(j), blocks.size(j)), j, kScatterGatherTag));
    }
    for (auto& s : sends)
      s.wait();
  } else if (blocks.size(r) > 0) {
    at::Tensor own = slice(flat, blocks.begin(r), blocks.size(r));
    group.recv(own, root, kScatterGatherTag);
  }
  detail::ring_steps(group, flat, ReduceOp::kSum, kScatterGatherTag, kSegmentBytes, p - 1,
                     2 * p - 2);
}

}  // namespace

int64_t block_count(int64_t count, int parts, int index) {
  return BlockLayout{count, parts}.size(index);
}

void broadcast(Group& group, at::Tensor& tensor, int root, BroadcastAlgorithm algo) {
  if (root < 0 || root >= group.size()) {
    throw std::invalid_argument(group.describe() + ": broadcast root " + std::to_string(root) +
                                " out of range");
  }
  at::Tensor flat = flat_view(group, tensor, "broadcast");
  if (group.size() == 1 || flat.numel() == 0) return;
  if (algo == BroadcastAlgorithm::kAuto) {
    algo = flat.numel() * flat.element_size() <= kTreeMaxBytes
               ? BroadcastAlgorithm::kBinomialTree
               : BroadcastAlgorithm::kScatterAllGather;
  }
  if (algo == BroadcastAlgorithm::kBinomialTree) {
    binomial_broadcast(group, flat, root);
  } else {
    scatter_all_gather_broadcast(group, flat, root);
  }
}

void reduce_scatter(Group& group, at::Tensor& input, at::Tensor& out, ReduceOp op) {
  at::Tensor flat = flat_view(group, input, "reduce_scatter input");
  at::Tensor dst = flat_view(group, out, "reduce_scatter output");
  const int p = group.size();
  const BlockLayout blocks{flat.numel(), p};
  check_count(group, dst, blocks.size(group.rank()), "reduce_scatter output");
  detail::ring_steps(group, flat, op, kScatterGatherTag, kSegmentBytes, 0, p - 1);
  dst.copy_(slice(flat, blocks.begin(group.rank()), blocks.size(group.rank())));
}

void all_gather(Group& group, const at::Tensor& mine, at::Tensor& out) {
  at::Tensor src = flat_view(group, mine, "all_gather input");
  at::Tensor flat = flat_view(group, out, "all_gather output");
  const int p = group.size();
  const BlockLayout blocks{flat.numel(), p};
  check_count(group, src, blocks.size(group.rank()), "all_gather input");
  slice(flat, blocks.begin(group.rank()), blocks.size(group.rank())).copy_(src);
  detail::ring_steps(group, flat, ReduceOp::kSum, kScatterGatherTag, kSegmentBytes, p - 1,
                     2 * p - 2);
}

}  // namespace dtrain::comm
