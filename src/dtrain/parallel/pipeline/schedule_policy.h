// Internal to the schedules: the round-by-round simulation most generators use. In each
// round every rank runs at most one op whose inputs completed in an earlier round, chosen
// by a policy; the order each rank ends up with is a topological order of the dependency
// graph, hence deadlock-free.
#pragma once

#include <vector>

#include "dtrain/parallel/pipeline/schedule.h"

namespace dtrain::parallel::pipeline {

struct SchedulePolicy {
  bool backward_first = false;  // among a rank's ready ops, backwards before forwards
  bool flush_forwards = false;  // no backward before the rank ran all its forwards
  // Most micro-batches stage v may hold (forwarded, not yet backwarded); nullptr: no bound.
  int (*in_flight_limit)(int stage, int stages, int ranks) = nullptr;
};

// Throws std::invalid_argument on an empty placement, a rank out of range, a rank without
// a stage or micro_batches < 1.
Schedule simulate(const SchedulePolicy& policy, bool with_backward,
                  const std::vector<int>& stage_rank, int ranks, int micro_batches);

}  // namespace dtrain::parallel::pipeline
