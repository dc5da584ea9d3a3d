// The data-parallel scaling study's arithmetic: from one measured epoch per
// (ranks, per-rank batch), speedups under both scalings, computation vs communication
// (measured and inferred) and bandwidth utilization. Definitions in docs/measurement.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dtrain/metrics/rows.h"

namespace dtrain::metrics {

struct ScalingRun {
  int ranks = 1;
  int64_t batch = 0;          // per rank
  std::string status = "ok";  // anything else: the run failed, no times
  double epoch_s = 0;         // the timed epoch, data wait excluded
  double compute_s = 0;       // forward + backward + optimizer, measured
  double comm_exposed_s = 0;  // time steps waited for communication, measured
  double comm_total_s = 0;    // time the all-reduces took (partly hidden behind backward)
  int64_t steps = 0;          // optimizer steps in the timed epoch
  int64_t model_bytes = 0;    // 4 * parameters
  double test_acc = 0;
  int64_t peak_rss_bytes = 0;
};

// One row per run with: ranks, batch_per_rank, global_batch, status, epoch_s,
// speedup_epoch = T(1,b)/T(N,b), speedup_weak = N*T(1,b)/T(N,b) (per-rank batch fixed),
// speedup_strong = T(1,G)/T(N,G/N) (global batch G fixed; when both runs exist),
// compute_s, comm_exposed_s, comm_total_s, comm_inferred_s = T(N,b) - T(1,b)/N,
// bandwidth_gbps = 2*model_bytes*(N-1)/N*steps / comm_total_s, test_acc, peak_rss_bytes.
std::vector<Row> scaling_rows(const std::vector<ScalingRun>& runs);
std::vector<Column> scaling_columns();

}  // namespace dtrain::metrics
