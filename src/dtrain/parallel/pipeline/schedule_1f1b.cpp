// 1f1b: one forward, one backward once the pipeline is full, so a stage holds at most as
// many micro-batches as the stages after it (Narayanan et al. 2019, "PipeDream", and
// Megatron-LM's non-interleaved schedule).
#include <algorithm>

#include "dtrain/parallel/pipeline/schedule_policy.h"

namespace dtrain::parallel::pipeline {
namespace {

// Stage v holds min(stages - v, ranks): the linear chain's stage 0 S, its last stage 1.
int one_f_one_b_limit(int stage, int stages, int ranks) {
  return std::min(stages - stage, ranks);
}

Schedule generate_1f1b(const std::vector<int>& stage_rank, int ranks, int micro_batches) {
  SchedulePolicy policy;
  policy.backward_first = true;
  policy.in_flight_limit = one_f_one_b_limit;
  return simulate(policy, true, stage_rank, ranks, micro_batches);
}

}  // namespace

extern const ScheduleFamily k1F1BSchedule{
    "1f1b", "a backward as soon as one is ready; bounded micro-batches in flight per stage",
    generate_1f1b};

}  // namespace dtrain::parallel::pipeline
