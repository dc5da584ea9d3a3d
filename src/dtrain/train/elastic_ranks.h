// Internal to the elastic trainer: the ranks of one replica of several (--ranks-per-replica
// K > 1 under --elastic, docs/elastic.md). The replica's first rank, its leader, is the
// replica in the membership (elastic_replica.h): it takes part in the outer steps, hands
// and receives the state, and decides the round. The other ranks follow it over the
// replica's own group, which also carries the inner steps' exact DDP:
//
// - Each round the leader shares the round's plan (its positions, epoch, round, learning
//   rate, whether the inner optimizer starts afresh) and its model's parameters and
//   buffers; every rank trains a slice of the positions (rank_slice).
// - Every inner step the ranks vote: a leader whose round closes (or a rank with no batch
//   left) stops them all at the same step, so the replica trained a prefix of its
//   positions (steps x K x batch). Where the leader's model changed between two steps (a
//   mid-round joiner's exact θ arrived), the vote says so and it shares its model again.
// - At the round's end the ranks sum what they trained (loss, correct, seen).
// - The run over (or the replica's leader finding it finished): the plan says so and the
//   followers return.
//
// A rank that dies takes its replica out: the others fail on the replica's group (its
// connections close) and the leader's heartbeats stop with it; the replica starts again
// whole (the launcher's slot, comm/launch.h; torchrun's restart of the replica's job).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace dtrain::comm {
class Group;
}
namespace torch::nn {
class Module;
}
namespace torch::optim {
class Optimizer;
}

namespace dtrain::train {

struct TrainConfig;

struct RoundPlan {
  bool finished = false;  // the run is over: the followers return
  int64_t epoch = 0, round = 0, share_index = 0;
  int64_t resets = 0;  // the leader's inner optimizer state was replaced this many times
  double lr = 0;
  std::vector<int64_t> positions;  // the replica's, this round
};

// Rank `place`'s part of a replica's positions `share` (`ranks` ranks, batches of
// `batch_size`): step j trains share's positions [j R B, (j + 1) R B) (R ranks, B the batch),
// split into R near-equal contiguous parts, the first parts the larger; so every rank has
// B positions a step but in the last, and after s steps of every rank the replica trained
// share's first s R B positions. Where the last step has fewer positions than ranks, the
// ranks left without one train a copy of the step's first position, weighted 0 (`filler`):
// DDP's exchange needs every rank, and the positions must not wait for a larger share.
struct RankSlice {
  std::vector<int64_t> positions;
  int64_t steps = 0;    // the replica's steps: ceil(share / (R B))
  bool filler = false;  // the last step's one position here is a weightless copy
};
RankSlice rank_slice(const std::vector<int64_t>& share, int place, int ranks, int64_t batch_size);

class ReplicaRanks {
 public:
  explicit ReplicaRanks(comm::Group& group) : group_(group) {}
  bool leader() const;
  int place() const;
  int size() const;
  comm::Group& group() { return group_; }

  // The leader's plan to every rank (the leader passes it; a follower's argument is ignored
  // and it gets the leader's).
  RoundPlan share_plan(const RoundPlan& plan);
  // The leader's parameters and buffers into every rank's `module`.
  void share_state(torch::nn::Module& module);
  // The leader's inner optimizer state into every rank's `optimizer` (inner_state.h).
  void share_inner(torch::optim::Optimizer& optimizer);
  struct Vote {
    bool go = true;        // every rank goes on to the next inner step
    bool refresh = false;  // the leader's model changed: share_state() follows
  };
  Vote vote(bool go, bool changed);
  // Sums `values` over the replica's ranks in place.
  void sum(std::vector<double>& values);

 private:
  comm::Group& group_;
};

// A follower's whole run (elastic_follower.cpp): the same data and model as its leader's,
// trained as each plan says, until the plan says the run is over.
void follow_leader(const TrainConfig& config, ReplicaRanks& ranks);

}  // namespace dtrain::train
