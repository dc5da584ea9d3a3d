// Test support for elastic runs: what their sample logs must show.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "e2e.h"

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

// What an elastic run left: its exit code, stderr and the logs of elastic_cnn_flags.
struct ElasticRun {
  int code = -1;
  std::string err;
  std::vector<nlohmann::json> metrics, steps, samples;
  std::vector<nlohmann::json> epochs() const {
    std::vector<nlohmann::json> out;
    for (const auto& r : metrics)
      if (r.contains("epoch") && !r.contains("event")) out.push_back(r);
    return out;
  }
  std::vector<nlohmann::json> events(const std::string& kind) const {
    std::vector<nlohmann::json> out;
    for (const auto& r : metrics)
      if (r.value("event", "") == kind) out.push_back(r);
    return out;
  }
};

// The logs at `base` (elastic_cnn_flags), read and removed.
inline ElasticRun take_elastic_logs(const std::string& base, int code, std::string err) {
  ElasticRun r;
  r.code = code;
  r.err = std::move(err);
  r.metrics = take_json_lines_file(base + ".metrics");
  r.steps = take_json_lines_file(base + ".steps");
  r.samples = take_json_lines_file(base + ".samples");
  return r;
}

// Two runs' epoch rows, bit for bit: losses, accuracy and committed samples.
inline void expect_epochs_identical(const ElasticRun& a, const ElasticRun& b, size_t epochs) {
  const auto ea = a.epochs(), eb = b.epochs();
  ASSERT_EQ(ea.size(), epochs) << a.err;
  ASSERT_EQ(eb.size(), epochs) << b.err;
  for (size_t e = 0; e < epochs; ++e)
    for (const char* k : {"train_loss", "test_loss", "test_acc", "committed_samples"})
      EXPECT_EQ(ea[e][k], eb[e][k]) << k << " of epoch " << e + 1;
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

// Streaming DiLoCo's order of fragments (2 of them) by round, from the step log: a round
// exchanges both where its assignment emptied its epoch's queue (every epoch's last round, and
// `whole_midway` lets others: a lost replica's share returned to the queue after it), else one,
// in turn since the last whole exchange (fragment 1 first). Returns the rounds seen.
inline size_t expect_fragments_in_turn(const ElasticRun& r, bool whole_midway) {
  std::map<int64_t, std::vector<int64_t>> fragments;  // by round
  std::map<int64_t, int64_t> epoch_of;
  for (const auto& s : r.steps) {
    fragments[s["round"].get<int64_t>()] = s["fragments"].get<std::vector<int64_t>>();
    epoch_of[s["round"].get<int64_t>()] = s["epoch"].get<int64_t>();
  }
  int64_t since_whole = 0;
  for (const auto& [round, exchanged] : fragments) {
    const bool ends_epoch = !epoch_of.count(round + 1) || epoch_of[round + 1] != epoch_of[round];
    const bool whole = exchanged == std::vector<int64_t>{0, 1};
    if (ends_epoch || (whole && whole_midway)) {
      EXPECT_TRUE(whole) << "round " << round;
      since_whole = 0;
      continue;
    }
    EXPECT_EQ(exchanged, std::vector<int64_t>{(since_whole + 1) % 2}) << "round " << round;
    ++since_whole;
  }
  return fragments.size();
}

}  // namespace dtrain::testing
