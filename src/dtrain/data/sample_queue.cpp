#include "dtrain/data/sample_queue.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace dtrain::data {

namespace {

void check_counts(int replicas, int64_t per_replica, int64_t epoch_size) {
  if (replicas < 1 || per_replica < 1 || epoch_size < 1)
    throw std::invalid_argument("assign_round: replicas " + std::to_string(replicas) +
                                ", per replica " + std::to_string(per_replica) + ", epoch size " +
                                std::to_string(epoch_size));
}

// Moves this epoch's redone positions (below `epoch_size`) out of `redo`, in their order.
std::vector<int64_t> take_this_epochs(std::vector<int64_t>& redo, int64_t epoch_size) {
  std::vector<int64_t> mine;
  std::vector<int64_t> ahead;
  for (const int64_t p : redo)
    (p < epoch_size ? mine : ahead).push_back(p);
  redo = std::move(ahead);
  return mine;
}

// Up to `count` of the next epoch's positions (n + i): its redone ones first. Only once this
// epoch's are all handed out.
std::vector<int64_t> take_ahead(SampleQueue& queue, int64_t count, int64_t epoch_size) {
  const auto redone = static_cast<std::ptrdiff_t>(
      std::min<int64_t>(count, static_cast<int64_t>(queue.redo.size())));
  std::vector<int64_t> mine(queue.redo.begin(), queue.redo.begin() + redone);
  queue.redo.erase(queue.redo.begin(), queue.redo.begin() + redone);
  queue.cursor = std::max(queue.cursor, epoch_size);
  while (static_cast<int64_t>(mine.size()) < count && queue.cursor < 2 * epoch_size)
    mine.push_back(queue.cursor++);
  return mine;
}

}  // namespace

std::vector<std::vector<int64_t>> assign_round(SampleQueue& queue, int replicas,
                                               int64_t per_replica, int64_t epoch_size,
                                               bool ahead) {
  check_counts(replicas, per_replica, epoch_size);
  std::vector<int64_t> redo = take_this_epochs(queue.redo, epoch_size);
  const int64_t left =
      static_cast<int64_t>(redo.size()) + std::max<int64_t>(0, epoch_size - queue.cursor);
  const int64_t full = per_replica * replicas;
  // Lost replicas' positions after the epoch's last round, fewer than half a round, fill
  // up with the next epoch's.
  const bool fill = ahead && 2 * left < full;
  // The epoch's last round, shares that differ by one at most, takes what a full round would
  // leave when that is less than half a round: a round of a few samples would still take a
  // whole outer step, its momentum's push and its exchange (docs/elastic.md).
  std::vector<int64_t> share(static_cast<size_t>(replicas), per_replica);
  if (2 * left < 3 * full && !fill)
    for (int r = 0; r < replicas; ++r)
      share[static_cast<size_t>(r)] = left / replicas + (r < left % replicas ? 1 : 0);
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(replicas));
  size_t next_redo = 0;
  for (int r = 0; r < replicas; ++r) {
    auto& mine = out[static_cast<size_t>(r)];
    for (int64_t i = 0; i < share[static_cast<size_t>(r)]; ++i) {
      if (next_redo < redo.size())
        mine.push_back(redo[next_redo++]);
      else if (queue.cursor < epoch_size)
        mine.push_back(queue.cursor++);
    }
  }
  // What is left of this epoch's redo goes first again, before the positions ahead.
  queue.redo.insert(queue.redo.begin(), redo.begin() + static_cast<std::ptrdiff_t>(next_redo),
                    redo.end());
  if (fill)
    for (auto& mine : out) {
      const std::vector<int64_t> more =
          take_ahead(queue, per_replica - static_cast<int64_t>(mine.size()), epoch_size);
      mine.insert(mine.end(), more.begin(), more.end());
    }
  return out;
}

std::vector<int64_t> assign_joiner(SampleQueue& queue, int64_t per_replica, int64_t epoch_size,
                                   bool ahead) {
  check_counts(1, per_replica, epoch_size);
  if (!epoch_done(queue, epoch_size) || !ahead)
    return assign_round(queue, 1, per_replica, epoch_size)[0];
  return take_ahead(queue, per_replica, epoch_size);
}

void next_epoch(SampleQueue& queue, int64_t epoch_size) {
  if (!epoch_done(queue, epoch_size))
    throw std::logic_error("next_epoch: epoch " + std::to_string(queue.epoch) +
                           " still has positions to hand out");
  queue.epoch += 1;
  queue.cursor = std::max<int64_t>(0, queue.cursor - epoch_size);
  for (int64_t& p : queue.redo)
    p -= epoch_size;
}

void requeue(SampleQueue& queue, const std::vector<int64_t>& positions) {
  queue.redo.insert(queue.redo.end(), positions.begin(), positions.end());
}

bool epoch_done(const SampleQueue& queue, int64_t epoch_size) {
  return queue.cursor >= epoch_size &&
         std::all_of(queue.redo.begin(), queue.redo.end(),
                     [epoch_size](int64_t p) { return p >= epoch_size; });
}

std::vector<int64_t> pack(const SampleQueue& queue) {
  std::vector<int64_t> out{queue.epoch, queue.cursor, static_cast<int64_t>(queue.redo.size())};
  out.insert(out.end(), queue.redo.begin(), queue.redo.end());
  return out;
}

SampleQueue unpack_queue(const std::vector<int64_t>& packed) {
  if (packed.size() < 3 || packed[2] < 0 || static_cast<size_t>(packed[2]) != packed.size() - 3 ||
      packed[1] < 0 || packed[0] < 0)
    throw std::invalid_argument("a malformed sample queue (" + std::to_string(packed.size()) +
                                " words)");
  SampleQueue q;
  q.epoch = packed[0];
  q.cursor = packed[1];
  q.redo.assign(packed.begin() + 3, packed.end());
  return q;
}

}  // namespace dtrain::data
