// Data-parallel training through the binary: real processes, real Fashion-MNIST.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <iostream>
#include <string>
#include <vector>

#include "../support/e2e.h"

namespace dtrain {
namespace {

using namespace std::chrono_literals;

// --compress-grad auto on loopback: the exact all-reduce is cheapest, and the run says so.
// The raw loopback wire: with the wire check on, each byte also costs a CRC at both ends,
// which on 2 cores brings loopback to about 3 GB/s, where fp16's halved bytes can win by the
// model's own numbers (the check's cost: docs/results.md). Even so, on the mlp the model puts
// fp16 within a few percent of none (ahead of it in 1 of 10 runs, where the probe read
// loopback at 32 Gbit/s instead of 50-85): epochs of 64 steps let the runoff settle that
// near-tie by measurement, where fp16 must be faster by more than 5 %. Beside the whole suite
// on 2 cores the runoff itself once measured fp16 ahead (a copy starved of its core), so a
// run that chose a codec is run again once, and the second must keep the exact all-reduce:
// an auto that misjudges loopback by its method does so every time.
struct DdpAutoRun {
  std::vector<nlohmann::json> rows;
  std::string out, err;
};
DdpAutoRun ddp_auto_on_loopback() {
  const std::string metrics = "/tmp/dtrain-e2e-ddp-auto-" + std::to_string(getpid()) + ".jsonl";
  testing::Process p({DTRAIN_BINARY, "train", "--parallel", "ddp", "-n", "2", "--model", "mlp",
                      "--limit-train", "8192", "--limit-test", "256", "--epochs", "2",
                      "--compress-grad", "auto", "--metrics", metrics, "--no-progress"},
                     {{"DTRAIN_WIRE_CHECK", "0"}});
  EXPECT_EQ(p.wait_for(300s), 0) << p.err();
  return {testing::take_json_lines_file(metrics), p.out(), p.err()};
}

bool kept_the_exact_all_reduce(const DdpAutoRun& run) {
  if (run.rows.size() != 3u) return false;
  for (int epoch = 0; epoch < 2; ++epoch) {
    const auto& links = run.rows[static_cast<size_t>(epoch)]["auto_links"];
    if (links.size() != 1u || links[0]["codec"] != "none") return false;
  }
  return true;
}

TEST(DdpE2eTest, CompressGradAutoKeepsTheExactAllReduceOnLoopback) {
  DdpAutoRun run = ddp_auto_on_loopback();
  if (!kept_the_exact_all_reduce(run)) {
    std::cerr << "auto chose a codec on loopback once, running again: "
              << (run.rows.empty() ? run.err : run.rows.front().dump()) << "\n";
    run = ddp_auto_on_loopback();
  }
  ASSERT_EQ(run.rows.size(), 3u) << run.err;
  for (int epoch = 0; epoch < 2; ++epoch) {
    const auto& links = run.rows[static_cast<size_t>(epoch)]["auto_links"];
    ASSERT_EQ(links.size(), 1u) << run.rows[static_cast<size_t>(epoch)].dump();
    EXPECT_EQ(links[0]["codec"], "none") << links.dump();
    EXPECT_GT(links[0]["rate_mbps"].get<double>(), 1000) << links.dump();
    // A loopback exchange is over in far less than 0.1 s: its time would be the ranks' skew.
    EXPECT_EQ(links[0]["rate_from"], "probe") << links.dump();
    EXPECT_EQ(links[0]["predicted_step_s_by_codec"].size(), 4u) << links.dump();
  }
  EXPECT_NE(run.err.find("auto (DDP gradients, slowest link): link "), std::string::npos)
      << run.err;
  EXPECT_NE(run.out.find("auto codec (chosen at its second step"), std::string::npos) << run.out;
  testing::Process pipeline(
      {DTRAIN_BINARY, "train", "--parallel", "pipeline", "-n", "2", "--compress-grad", "auto"});
  EXPECT_EQ(pipeline.wait_for(60s), 1);
  EXPECT_NE(pipeline.err().find("--compress-grad auto is for --parallel ddp"), std::string::npos)
      << pipeline.err();
}

TEST(DdpE2eTest, TwoRanksWithAccumulationAndCompressedGradientsLearn) {
  const std::string metrics = "/tmp/dtrain-e2e-ddp-" + std::to_string(getpid()) + ".jsonl";
  testing::Process p({DTRAIN_BINARY,
                      "train",
                      "--parallel",
                      "ddp",
                      "-n",
                      "2",
                      "--model",
                      "cnn",
                      "--limit-train",
                      "3000",
                      "--limit-test",
                      "1000",
                      "--epochs",
                      "2",
                      "--batch-size",
                      "32",
                      "--grad-accum-steps",
                      "2",
                      "--compress-grad",
                      "sortquant:8",
                      "--algo",
                      "ring",
                      "--metrics",
                      metrics,
                      "--no-progress"});
  ASSERT_EQ(p.wait_for(300s), 0) << p.err();
  const auto rows = testing::take_json_lines_file(metrics);
  ASSERT_EQ(rows.size(), 3u);
  const auto& last = rows[1];
  EXPECT_GT(last["test_acc"].get<double>(), 0.6);
  EXPECT_LT(last["train_loss"].get<double>(), rows[0]["train_loss"].get<double>());
  // 3000 samples, 1500 per rank, batches of 32, two per step: 24 steps.
  EXPECT_EQ(last["steps"].get<int64_t>(), 24);
  const double saved = last["grad_wire_bytes"].get<double>() / last["grad_bytes"].get<double>();
  EXPECT_LT(saved, 0.3);  // sortquant:8 both ways vs the exact path's 2(p-1)/p = 1
  EXPECT_GE(last["comm_hidden_fraction"].get<double>(), 0.0);
  EXPECT_EQ(rows[2]["ranks"].get<int>(), 2);
  // Only rank 0 prints the table.
  EXPECT_NE(p.out().find("[rank 0] epoch"), std::string::npos);
  EXPECT_EQ(p.out().find("[rank 1] epoch"), std::string::npos);
}

TEST(DdpE2eTest, SyncBatchNormRunsOnAModelWithBatchNorm) {
  const std::string metrics = "/tmp/dtrain-e2e-syncbn-" + std::to_string(getpid()) + ".jsonl";
  testing::Process p(
      {DTRAIN_BINARY, "train",        "--parallel", "ddp",          "-n",        "2",
       "--model",     "mobilenetv2",  "--width",    "0.25",         "--sync-bn", "--limit-train",
       "256",         "--limit-test", "128",        "--epochs",     "1",         "--batch-size",
       "32",          "--metrics",    metrics,      "--no-progress"});
  ASSERT_EQ(p.wait_for(300s), 0) << p.err();
  const auto rows = testing::take_json_lines_file(metrics);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_TRUE(std::isfinite(rows[0]["train_loss"].get<double>()));
  testing::Process bad({DTRAIN_BINARY, "train", "--parallel", "ddp", "-n", "2", "--model", "mlp",
                        "--sync-bn", "--limit-train", "64", "--timeout", "20"});
  EXPECT_NE(bad.wait_for(120s), 0);
  EXPECT_NE(bad.err().find("has no BatchNorm"), std::string::npos) << bad.err();
}

TEST(DdpE2eTest, RanksWithDifferentModelsFailClearly) {
  const int port = 32000 + static_cast<int>(getpid() % 1000);
  auto ranks = testing::start_ranks(
      [](int rank) {
        return std::vector<std::string>{
            DTRAIN_BINARY,   "train", "--parallel", "ddp",
            "--model",       "mlp",   "--depth",    rank == 0 ? "2" : "3",
            "--limit-train", "64",    "--timeout",  "20"};
      },
      2, port);
  for (auto& r : ranks) {
    EXPECT_EQ(r->wait_for(120s), 1) << r->err();
    EXPECT_NE(r->err().find("models differ"), std::string::npos) << r->err();
  }
}

TEST(ScaleE2eTest, StudyTableForOneAndTwoRanks) {
  testing::Process p({DTRAIN_BINARY, "scale", "--model", "mlp", "-n", "1,2", "--batch-size",
                      "32,64", "--epochs", "2", "--limit-train", "1024", "--limit-test", "256",
                      "--format", "jsonl"});
  ASSERT_EQ(p.wait_for(300s), 0) << p.err();
  const auto rows = testing::json_lines(p.out());
  ASSERT_EQ(rows.size(), 4u);
  for (const auto& r : rows) {
    EXPECT_EQ(r["status"], "ok") << r.dump();
    EXPECT_GT(r["epoch_s"].get<double>(), 0) << r.dump();
    EXPECT_TRUE(r.contains("speedup_weak")) << r.dump();
  }
  // Two ranks at 32 per rank = global 64: the strong-scaling pair of one rank at 64.
  EXPECT_TRUE(rows[2].contains("speedup_strong")) << rows[2].dump();
  EXPECT_GT(rows[2]["bandwidth_gbps"].get<double>(), 0) << rows[2].dump();
  EXPECT_DOUBLE_EQ(rows[2]["speedup_weak"].get<double>(),
                   2 * rows[0]["epoch_s"].get<double>() / rows[2]["epoch_s"].get<double>());
}

}  // namespace
}  // namespace dtrain
