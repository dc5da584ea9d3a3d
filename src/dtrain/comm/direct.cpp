// Direct all-reduce (what some write-ups call "butterfly"): rank j owns block j; every rank sends
// block j straight to rank j, which reduces the p contributions in rank order, then sends
// its reduced block straight to every other rank. p-1 messages each way per rank, all in
// flight at once: good for small worlds, poor when p grows.
#include <ATen/ATen.h>

#include <vector>

#include "dtrain/comm/algorithms.h"
#include "dtrain/comm/group.h"
#include "dtrain/comm/layout.h"

namespace dtrain::comm::detail {

void direct_all_reduce(Group& group, at::Tensor& flat, ReduceOp op, int tag) {
  const int p = group.size();
  const int r = group.rank();
  if (p == 1) {
    finalize_reduction(flat, op, 1);
    return;
  }
  const BlockLayout blocks{flat.numel(), p};
  auto block = [&](int j) { return slice(flat, blocks.begin(j), blocks.size(j)); };
  at::Tensor own = block(r);

  std::vector<Request> sends;
  std::vector<Request> recvs;
  at::Tensor staging = at::empty({(p - 1) * own.numel()}, flat.options());
  // Both phases post receives and sends in the order post_exchange() gives.
  auto post_sends = [&](auto&& what) {
    for (int i = 1; i < p; ++i) {  // staggered so rank j is not everyone's first target
      const int peer = wrap(r + i, p);
      sends.push_back(group.isend(what(peer), peer, tag));
    }
  };
  std::vector<at::Tensor> parts(static_cast<size_t>(p));
  post_exchange(
      own.nbytes(),
      [&] {
        for (int i = 1; i < p; ++i) {
          const int peer = wrap(r - i, p);
          parts[static_cast<size_t>(peer)] = slice(staging, (i - 1) * own.numel(), own.numel());
          recvs.push_back(group.irecv(parts[static_cast<size_t>(peer)], peer, tag));
        }
      },
      [&] { post_sends(block); });
  for (auto& req : recvs)
    req.wait();
  // Reduce in rank order so the result does not depend on arrival order.
  at::Tensor acc = own.clone();
  if (r != 0) acc.copy_(parts[0]);
  for (int j = 1; j < p; ++j) {
    combine_into(acc, j == r ? own : parts[static_cast<size_t>(j)], op);
  }
  for (auto& req : sends)
    req.wait();
  own.copy_(acc);
  finalize_reduction(own, op, p);

  sends.clear();
  recvs.clear();
  post_exchange(
      own.nbytes(),
      [&] {
        for (int i = 1; i < p; ++i) {
          const int peer = wrap(r - i, p);
          at::Tensor dst = block(peer);
          recvs.push_back(group.irecv(dst, peer, tag));
        }
      },
      [&] { post_sends([&](int) { return own; }); });
  for (auto& req : recvs)
    req.wait();
  for (auto& req : sends)
    req.wait();
}

}  // namespace dtrain::comm::detail
