// gpipe: every forward of a mini-batch, then every backward (a flush per step); activation
// memory grows with the micro-batches (Huang et al. 2019, "GPipe").
#include "dtrain/parallel/pipeline/schedule_policy.h"

namespace dtrain::parallel::pipeline {
namespace {

Schedule generate_gpipe(const std::vector<int>& stage_rank, int ranks, int micro_batches) {
  SchedulePolicy policy;
  policy.flush_forwards = true;
  return simulate(policy, true, stage_rank, ranks, micro_batches);
}

}  // namespace

extern const ScheduleFamily kGPipeSchedule{
    "gpipe", "all forwards, then all backwards (a flush per mini-batch)", generate_gpipe};

}  // namespace dtrain::parallel::pipeline
