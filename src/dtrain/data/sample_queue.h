// The samples of an epoch handed out round by round to whichever replicas are live (elastic
// DiLoCo, docs/elastic.md): every replica of a round takes the next positions of the epoch's
// permutation, and the positions of a replica lost before its round counted are handed out
// again first in a later round, so that every sample of an epoch is trained once by a round
// that counted.
//
// Positions index the epoch's permutation (sampler.h with one shard: the same on every
// replica for a seed and epoch); position n + i, in an epoch of n, is the next epoch's i,
// handed out ahead to a replica that joins in an epoch's last round (assign_joiner). The
// queue is part of the shared state the replicas agree on: each applies the same
// assignments and requeues in the same order.
#pragma once

#include <cstdint>
#include <vector>

namespace dtrain::data {

struct SampleQueue {
  int64_t epoch = 0;
  int64_t cursor = 0;         // positions [0, cursor) handed out (beyond the epoch: ahead)
  std::vector<int64_t> redo;  // positions to hand out again, before the cursor's
};

// The positions for each of `replicas` this round: `per_replica` each, first from `redo`,
// then from the cursor. The epoch's last round takes every position left, split as evenly as
// it goes (no replica gets more than one more than another); it is the last once a full
// round would leave fewer than half a round's positions, so it holds between half a round
// and one and a half (fewer where the epoch has fewer, or a lost replica's come back after
// it). Only this epoch's: positions ahead wait in `redo` for the next. With `ahead` (the
// run has a next epoch), a round that this epoch's left positions (a lost replica's given
// back after the epoch's last round) would leave less than half full is filled up with the
// next epoch's first positions, as assign_joiner's. Advances the queue. Throws
// std::invalid_argument on non-positive counts.
std::vector<std::vector<int64_t>> assign_round(SampleQueue& queue, int replicas,
                                               int64_t per_replica, int64_t epoch_size,
                                               bool ahead = false);

// One joiner's positions after the round's members took theirs: assign_round's for one
// replica while the epoch has any left; once it has none (the epoch's last round) and
// `ahead` is set, up to `per_replica` of the next epoch's, as positions n + i (its redone
// ones first). Without `ahead` (the run's last epoch) none.
std::vector<int64_t> assign_joiner(SampleQueue& queue, int64_t per_replica, int64_t epoch_size,
                                   bool ahead);

// Where a position handed out in `epoch` lies: that epoch's, or (n + i) the next one's i.
struct EpochPosition {
  int64_t epoch = 0, index = 0;
};
inline EpochPosition locate(int64_t epoch, int64_t position, int64_t epoch_size) {
  return {epoch + position / epoch_size, position % epoch_size};
}

// The next epoch begins: its positions handed out ahead (n + i) become i.
void next_epoch(SampleQueue& queue, int64_t epoch_size);

// Positions of a round that did not count (a lost replica's) go back to the queue.
void requeue(SampleQueue& queue, const std::vector<int64_t>& positions);

// Every position of the epoch handed out and none of it waiting to be again.
bool epoch_done(const SampleQueue& queue, int64_t epoch_size);

// Flat int64 form, for the shared state's transfer and digest: [epoch, cursor, n, redo...].
std::vector<int64_t> pack(const SampleQueue& queue);
SampleQueue unpack_queue(const std::vector<int64_t>& packed);

}  // namespace dtrain::data
