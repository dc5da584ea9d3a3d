#include "dtrain/metrics/scaling.h"

#include "dtrain/metrics/bandwidth.h"
#include "dtrain/metrics/keys.h"

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
    row[key::kRanks] = r.ranks;
    row[key::kBatchPerRank] = r.batch;
    row[key::kGlobalBatch] = r.batch * r.ranks;
    row[key::kStatus] = r.status;
    if (r.status != "ok") {
      rows.push_back(row);
      continue;
    }
    row[key::kEpochS] = r.epoch_s;
    if (const ScalingRun* one = find(runs, 1, r.batch)) {
      row[key::kSpeedupEpoch] = one->epoch_s / r.epoch_s;
      row[key::kSpeedupWeak] = r.ranks * one->epoch_s / r.epoch_s;
      row[key::kCommInferredS] = r.epoch_s - one->epoch_s / r.ranks;
    }
    if (const ScalingRun* one = find(runs, 1, r.batch * r.ranks))
      row[key::kSpeedupStrong] = one->epoch_s / r.epoch_s;
    row[key::kComputeS] = r.compute_s;
    row[key::kCommExposedS] = r.comm_exposed_s;
    row[key::kCommTotalS] = r.comm_total_s;
    if (r.ranks > 1 && r.comm_total_s > 0) {
      const double traffic = static_cast<double>(ring_allreduce_traffic(r.model_bytes, r.ranks));
      row[key::kBandwidthGbps] = algbw_gbps(traffic * static_cast<double>(r.steps), r.comm_total_s);
    }
    row[key::kTestAcc] = r.test_acc;
    row[key::kPeakRssBytes] = r.peak_rss_bytes;
    rows.push_back(row);
  }
  return rows;
}

std::vector<Column> scaling_columns() {
  return {{key::kRanks, "N"},
          {key::kBatchPerRank, "batch/rank"},
          {key::kGlobalBatch, "global"},
          {key::kEpochS, "epoch(s)", 2},
          {key::kSpeedupEpoch, "T1/TN", 3},
          {key::kSpeedupWeak, "N*T1/TN", 3},
          {key::kSpeedupStrong, "strong", 3},
          {key::kComputeS, "compute(s)", 2},
          {key::kCommExposedS, "comm waited(s)", 2},
          {key::kCommTotalS, "comm total(s)", 2},
          {key::kCommInferredS, "TN-T1/N(s)", 2},
          {key::kBandwidthGbps, "bw util GB/s", 3},
          {key::kTestAcc, "test acc", 4},
          {key::kPeakRssBytes, "peakRSS(B)"},
          {key::kStatus, "status"}};
}

}  // namespace dtrain::metrics
