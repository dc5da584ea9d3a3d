// Butterfly all-reduce (Rabenseifner): recursive-halving reduce-scatter, then
// recursive-doubling all-gather, over the largest power of two p' <= p ranks.
// The other p - p' ranks fold in first: among ranks 0..2(p-p')-1 each even rank hands its
// vector to the odd rank above it and receives the result at the end.
// Small messages skip the halving and exchange whole vectors (recursive doubling).
#include <ATen/ATen.h>

#include "dtrain/comm/algorithms.h"
#include "dtrain/comm/group.h"
#include "dtrain/comm/layout.h"

namespace dtrain::comm::detail {
namespace {

int largest_power_of_two_at_most(int p) {
  int q = 1;
  while (q * 2 <= p)
    q *= 2;
  return q;
}

// Sends `mine` to `peer` and receives the same number of elements into `theirs`.
void exchange(Group& group, const at::Tensor& mine, at::Tensor& theirs, int peer, int tag) {
  Request recv, send;
  post_exchange(
      mine.nbytes(), [&] { recv = group.irecv(theirs, peer, tag); },
      [&] { send = group.isend(mine, peer, tag); });
  recv.wait();
  send.wait();
}

}  // namespace

void butterfly_all_reduce(Group& group, at::Tensor& flat, ReduceOp op, int tag) {
  const int p = group.size();
  const int r = group.rank();
  if (p == 1 || flat.numel() == 0) {
    finalize_reduction(flat, op, 1);
    return;
  }
  const int q = largest_power_of_two_at_most(p);
  const int extra = p - q;
  // Virtual rank among the q participants; -1 for the even ranks that fold into r+1.
  const int vrank = r < 2 * extra ? (r % 2 == 1 ? r / 2 : -1) : r - extra;
  auto real_rank = [&](int v) { return v < extra ? 2 * v + 1 : v + extra; };

  if (r < 2 * extra) {
    if (vrank < 0) {
      group.send(flat, r + 1, tag);
      group.recv(flat, r + 1, tag);
      return;
    }
    at::Tensor incoming = at::empty_like(flat);
    group.recv(incoming, r - 1, tag);
    combine_into(flat, incoming, op);
  }

  const int64_t bytes = flat.numel() * flat.element_size();
  if (bytes <= kRecursiveDoublingMaxBytes || flat.numel() < q) {
    at::Tensor incoming = at::empty_like(flat);
    for (int mask = 1; mask < q; mask <<= 1) {
      exchange(group, flat, incoming, real_rank(vrank ^ mask), tag);
      combine_into(flat, incoming, op);
    }
    finalize_reduction(flat, op, p);
  } else {
    // Blocks of the q-way layout; this rank's range of blocks halves each round.
    const BlockLayout blocks{flat.numel(), q};
    int lo = 0;
    int hi = q;
    // q/2 consecutive blocks hold at most n/2 + q/2 elements.
    at::Tensor incoming = at::empty({flat.numel() / 2 + q}, flat.options());
    for (int mask = q / 2; mask >= 1; mask >>= 1) {
      const int mid = lo + (hi - lo) / 2;
      const bool keep_low = (vrank & mask) == 0;
      const int keep_lo = keep_low ? lo : mid, keep_hi = keep_low ? mid : hi;
      const int give_lo = keep_low ? mid : lo, give_hi = keep_low ? hi : mid;
      at::Tensor give =
          slice(flat, blocks.begin(give_lo), blocks.begin(give_hi) - blocks.begin(give_lo));
      at::Tensor keep =
          slice(flat, blocks.begin(keep_lo), blocks.begin(keep_hi) - blocks.begin(keep_lo));
      at::Tensor recv = slice(incoming, 0, keep.numel());
      exchange(group, give, recv, real_rank(vrank ^ mask), tag);
      combine_into(keep, recv, op);
      lo = keep_lo;
      hi = keep_hi;
    }
    at::Tensor own = slice(flat, blocks.begin(lo), blocks.size(lo));
    finalize_reduction(own, op, p);
    for (int mask = 1; mask < q; mask <<= 1) {
      // Partner holds the mirror range; together they form the next larger range.
      const int size = hi - lo;
      const bool low = (vrank & mask) == 0;
      const int their_lo = low ? hi : lo - size, their_hi = low ? hi + size : lo;
      at::Tensor mine = slice(flat, blocks.begin(lo), blocks.begin(hi) - blocks.begin(lo));
      at::Tensor theirs =
          slice(flat, blocks.begin(their_lo), blocks.begin(their_hi) - blocks.begin(their_lo));
      exchange(group, mine, theirs, real_rank(vrank ^ mask), tag);
      lo = std::min(lo, their_lo);
      hi = std::max(hi, their_hi);
    }
  }

  if (r < 2 * extra) group.send(flat, r - 1, tag);
}

}  // namespace dtrain::comm::detail
