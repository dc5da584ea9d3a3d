#include "dtrain/data/sample_queue.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace dtrain::data {

std::vector<std::vector<int64_t>> assign_round(SampleQueue& queue, int replicas,
                                               int64_t per_replica, int64_t epoch_size) {
  if (replicas < 1 || per_replica < 1 || epoch_size < 1)
    throw std::invalid_argument("assign_round: replicas " + std::to_string(replicas) +
                                ", per replica " + std::to_string(per_replica) + ", epoch size " +
                                std::to_string(epoch_size));
  const int64_t left = static_cast<int64_t>(queue.redo.size()) + (epoch_size - queue.cursor);
  const int64_t full = per_replica * replicas;
  // The epoch's last round: shares that differ by one at most.
  std::vector<int64_t> share(static_cast<size_t>(replicas), per_replica);
  if (left < full)
    for (int r = 0; r < replicas; ++r)
      share[static_cast<size_t>(r)] = left / replicas + (r < left % replicas ? 1 : 0);
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(replicas));
  size_t next_redo = 0;
  for (int r = 0; r < replicas; ++r) {
    auto& mine = out[static_cast<size_t>(r)];
    for (int64_t i = 0; i < share[static_cast<size_t>(r)]; ++i) {
      if (next_redo < queue.redo.size())
        mine.push_back(queue.redo[next_redo++]);
      else if (queue.cursor < epoch_size)
        mine.push_back(queue.cursor++);
    }
  }
  queue.redo.erase(queue.redo.begin(), queue.redo.begin() + static_cast<std::ptrdiff_t>(next_redo));
  return out;
}

void requeue(SampleQueue& queue, const std::vector<int64_t>& positions) {
  queue.redo.insert(queue.redo.end(), positions.begin(), positions.end());
}

bool epoch_done(const SampleQueue& queue, int64_t epoch_size) {
  return queue.cursor >= epoch_size && queue.redo.empty();
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
