// Test support for elastic runs: what their sample logs must show.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <map>
#include <set>
#include <string>
#include <vector>

namespace dtrain::testing {

// The training flags elastic e2e runs share: the cnn on 3,840 samples an epoch (rounds of
// 5 steps of 64 a replica, unless given), AdamW, and its logs at `base`.metrics, .steps and
// .samples.
inline std::vector<std::string> elastic_cnn_flags(int epochs, const std::string& base,
                                                  int64_t samples = 3840, int sync_every = 5) {
  return {"--parallel",
          "diloco",
          "--elastic",
          "--model",
          "cnn",
          "--epochs",
          std::to_string(epochs),
          "--limit-train",
          std::to_string(samples),
          "--limit-test",
          "500",
          "--sync-every",
          std::to_string(sync_every),
          "--optimizer",
          "adamw",
          "--lr",
          "1e-3",
          "--metrics",
          base + ".metrics",
          "--step-log",
          base + ".steps",
          "--sample-log",
          base + ".samples",
          "--no-progress"};
}

// Every position of each of `epochs` epochs of `n` samples counted in exactly one round's
// contribution (rows of --sample-log).
inline void expect_every_sample_once(const std::vector<nlohmann::json>& samples, int epochs,
                                     int64_t n, const std::string& context) {
  std::map<int64_t, std::multiset<int64_t>> counted;
  for (const auto& row : samples)
    for (const int64_t pos : row["positions"].get<std::vector<int64_t>>())
      counted[row["epoch"].get<int64_t>()].insert(pos);
  ASSERT_EQ(counted.size(), static_cast<size_t>(epochs)) << context;
  for (const auto& [epoch, positions] : counted) {
    EXPECT_EQ(positions.size(), static_cast<size_t>(n)) << "epoch " << epoch;
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(positions.count(i), 1u) << "epoch " << epoch << ", position " << i;
  }
}

}  // namespace dtrain::testing
