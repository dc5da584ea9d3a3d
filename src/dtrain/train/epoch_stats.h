// What one epoch measured, as a struct for code and as a metrics row (JSON lines, tables).
// The row keys are spelled once, in metrics/keys.h.
#pragma once

#include <cstdint>
#include <vector>

#include "dtrain/metrics/rows.h"

namespace dtrain::train {

struct EpochStats {
  int64_t epoch = 0;
  double train_loss = 0, train_acc = 0, test_loss = 0, test_acc = 0;
  double samples_per_s = 0, epoch_s = 0;
  double time_data_s = 0, time_forward_s = 0, time_backward_s = 0, time_optimizer_s = 0,
         time_comm_s = 0;
  double lr = 0;
  int64_t peak_rss_bytes = 0;
  metrics::Row extra;  // mode-specific keys (pipeline: stages, links, bubble, ratio)
  // The epoch's step-log rows (metrics/keys.h, kStep): rank 0's own batches. Not part of
  // to_row(); the trainer writes them to --step-log, the CLI hands them to --report.
  std::vector<metrics::Row> steps;
  metrics::Row to_row() const;
};

// The per-epoch table for people (pipeline: with its wire ratio and bubble columns). Keys
// only some runs write get their columns when `last` (the last epoch's row) has them: test
// MCC, and the wire check's measured cost (--measure-wire-check).
std::vector<metrics::Column> epoch_columns(bool pipeline, const metrics::Row& last);

}  // namespace dtrain::train
