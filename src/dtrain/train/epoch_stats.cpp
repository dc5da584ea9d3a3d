#include "dtrain/train/epoch_stats.h"

#include "dtrain/metrics/keys.h"

namespace dtrain::train {

namespace key = metrics::key;

metrics::Row EpochStats::to_row() const {
  metrics::Row r;
  r[key::kEpoch] = epoch;
  r[key::kTrainLoss] = train_loss;
  r[key::kTrainAcc] = train_acc;
  r[key::kTestLoss] = test_loss;
  r[key::kTestAcc] = test_acc;
  r[key::kSamplesPerS] = samples_per_s;
  r[key::kEpochS] = epoch_s;
  r[key::kLr] = lr;
  r[key::kTimeDataS] = time_data_s;
  r[key::kTimeForwardS] = time_forward_s;
  r[key::kTimeBackwardS] = time_backward_s;
  r[key::kTimeOptimizerS] = time_optimizer_s;
  r[key::kTimeCommS] = time_comm_s;
  r[key::kPeakRssBytes] = peak_rss_bytes;
  for (const auto& [name, value] : extra.items())
    r[name] = value;
  return r;
}

std::vector<metrics::Column> epoch_columns(bool pipeline, const metrics::Row& last) {
  std::vector<metrics::Column> columns{{key::kEpoch, "epoch"},
                                       {key::kTrainLoss, "train loss", 4},
                                       {key::kTrainAcc, "train acc", 4},
                                       {key::kTestLoss, "test loss", 4},
                                       {key::kTestAcc, "test acc", 4},
                                       {key::kSamplesPerS, "samples/s", 1},
                                       {key::kEpochS, "time(s)", 1},
                                       {key::kTimeDataS, "data(s)", 2},
                                       {key::kTimeForwardS, "fwd(s)", 2},
                                       {key::kTimeBackwardS, "bwd(s)", 2},
                                       {key::kTimeOptimizerS, "opt(s)", 2},
                                       {key::kTimeCommS, "comm(s)", 2},
                                       {key::kPeakRssBytes, "peakRSS(B)"}};
  if (last.contains(key::kTestMcc))
    columns.insert(columns.begin() + 5, {key::kTestMcc, "test MCC", 4});
  if (pipeline) {
    columns.push_back({key::kCompressionRatio, "wire/fp32", 4});
    columns.push_back({key::kBubbleMeasured, "bubble", 3});
    columns.push_back({key::kBubbleIdeal, "ideal", 3});
  }
  if (last.contains(key::kWireCheckCost)) {
    columns.push_back({key::kWireCheckCost, "check cost", 4});
    columns.push_back({key::kWireCheckCostCi95, "+-95%", 4});
  }
  return columns;
}

}  // namespace dtrain::train
