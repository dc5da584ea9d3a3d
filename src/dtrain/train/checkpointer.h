// Checkpoints of a job, collectively: every rank writes its own shard, rank 0 commits the
// manifest (train/checkpoint.h), and every rank learns whether the checkpoint committed.
// One mechanism for every mode: a single process (no group), data parallelism and
// pipelines (every rank saves its stages; the followers take part when rank 0's command
// tells them to). With `replicas` (DDP: every rank's module and optimizer equal rank 0's)
// only rank 0's shard holds the module and optimizer state; the other shards hold what is
// their own (generator, position, error-feedback residuals), and on resume rank 0 sends
// them its module and optimizer state with the group's broadcast.
//
// Both calls are collective over the group: every rank calls them at the same point.
// Failures are clear errors on every rank: the rank that failed names its cause, the others
// name that rank; the last good checkpoint is left intact.
#pragma once

#include <optional>
#include <string>

#include "dtrain/train/checkpoint.h"
#include "dtrain/train/shard_state.h"

namespace dtrain::comm {
class Group;
}

namespace dtrain::train {

class Checkpointer {
 public:
  // `layout` says what must match to resume (e.g. "pipeline, 3 ranks, stages 0:0-1@0 ...");
  // `parameters`: the whole model's count. `group` may be null (one process).
  Checkpointer(std::string dir, comm::Group* group, std::string layout, int64_t parameters,
               bool replicas = false);

  // Writes this rank's shard at `at` and (rank 0) commits the manifest; then removes this
  // rank's older shards. Throws std::runtime_error when any rank failed.
  void save(const Position& at, const RankState& state);

  // Restores this rank's state from the directory's manifest; nullopt when there is none.
  // Throws std::runtime_error on every rank when the checkpoint is corrupt, a shard is
  // missing, or it was written by another layout or model.
  std::optional<Position> restore(const RankState& state);

 private:
  int rank() const;
  // Sums a failure flag over the ranks: the first failing rank, or -1.
  int first_failure(bool failed) const;
  // first_failure(), then throws this rank's `error` or names the rank that failed.
  void agree(const std::string& error) const;
  // Replicas: rank 0's module and optimizer tensors merged into each other rank's
  // contents. Collective; returns this rank's error, if any.
  std::string receive_replicated(ShardContents& contents) const;

  std::string dir_;
  comm::Group* group_;
  std::string layout_;
  int64_t parameters_;
  bool replicas_;
};

}  // namespace dtrain::train
