#include "dtrain/metrics/scaling.h"

#include "dtrain/metrics/bandwidth.h"

namespace dtrain::metrics {
namespace {

const ScalingRun* find(const std::vector<ScalingRun>& runs, int ranks, int64_t batch) {
  for (const auto& r : runs)
    if (r.ranks == ranks && r.batch == batch && r.status == "ok") return &r;
  return nullptr;
}

}  // namespace

std::vector<Row> scaling_rows(const std::vector<ScalingRun>& runs) {
  std::vector<Row> rows;
  for (const auto& r : runs) {
    Row row;
    row["ranks"] = r.ranks;
    row["batch_per_rank"] = r.batch;
    row["global_batch"] = r.batch * r.ranks;
    row["status"] = r.status;
    if (r.status != "ok") {
      rows.push_back(row);
      continue;
    }
    row["epoch_s"] = r.epoch_s;
    if (const ScalingRun* one = find(runs, 1, r.batch)) {
      row["speedup_epoch"] = one->epoch_s / r.epoch_s;
      row["speedup_weak"] = r.ranks * one->epoch_s / r.epoch_s;
      row["comm_inferred_s"] = r.epoch_s - one->epoch_s / r.ranks;
    }
    if (const ScalingRun* one = find(runs, 1, r.batch * r.ranks))
      row["speedup_strong"] = one->epoch_s / r.epoch_s;
    row["compute_s"] = r.compute_s;
    row["comm_exposed_s"] = r.comm_exposed_s;
    row["comm_total_s"] = r.comm_total_s;
    if (r.ranks > 1 && r.comm_total_s > 0) {
      const double traffic = static_cast<double>(ring_allreduce_traffic(r.model_bytes, r.ranks));
      row["bandwidth_gbps"] = algbw_gbps(traffic * static_cast<double>(r.steps), r.comm_total_s);
    }
    row["test_acc"] = r.test_acc;
    row["peak_rss_bytes"] = r.peak_rss_bytes;
    rows.push_back(row);
  }
  return rows;
}

std::vector<Column> scaling_columns() {
  return {{"ranks", "N"},
          {"batch_per_rank", "batch/rank"},
          {"global_batch", "global"},
          {"epoch_s", "epoch(s)", 2},
          {"speedup_epoch", "T1/TN", 3},
          {"speedup_weak", "N*T1/TN", 3},
          {"speedup_strong", "strong", 3},
          {"compute_s", "compute(s)", 2},
          {"comm_exposed_s", "comm waited(s)", 2},
          {"comm_total_s", "comm total(s)", 2},
          {"comm_inferred_s", "TN-T1/N(s)", 2},
          {"bandwidth_gbps", "bw util GB/s", 3},
          {"test_acc", "test acc", 4},
          {"peak_rss_bytes", "peakRSS(B)"},
          {"status", "status"}};
}

}  // namespace dtrain::metrics
