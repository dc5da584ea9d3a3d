// Pipeline training through the binary: real processes from the launcher, real
// Fashion-MNIST, and a stage killed mid-run.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include "../support/e2e.h"

namespace dtrain {
namespace {

using namespace std::chrono_literals;

// On loopback the wire is faster than any codec: auto keeps none on the client's links
// (3-stage U-shape: 0<->1 and 2<->0 are tuned, both directions; 1<->2 is a server link and
// stays plain).
TEST(PipelineE2eTest, CompressAutoKeepsNoneOnLoopbackAndSaysWhy) {
  const std::string metrics = "/tmp/dtrain-e2e-auto-" + std::to_string(getpid()) + ".jsonl";
  testing::Process p({DTRAIN_BINARY,   "train",  "--parallel",   "pipeline", "-n",           "3",
                      "--placement",   "ushape", "--model",      "mlp",      "--depth",      "3",
                      "--limit-train", "1024",   "--limit-test", "256",      "--epochs",     "2",
                      "--compress",    "auto",   "--metrics",    metrics,    "--no-progress"},
                     {{"DTRAIN_WIRE_CHECK", "0"}});  // the raw wire (see ddp_train_test.cpp)
  ASSERT_EQ(p.wait_for(300s), 0) << p.err();
  const auto rows = testing::take_json_lines_file(metrics);
  ASSERT_EQ(rows.size(), 3u);
  for (int epoch = 0; epoch < 2; ++epoch) {
    const auto& links = rows[static_cast<size_t>(epoch)]["auto_links"];
    ASSERT_EQ(links.size(), 4u) << rows[static_cast<size_t>(epoch)].dump();
    for (const auto& l : links) {
      EXPECT_TRUE(l["src"] == 0 || l["dst"] == 0) << l.dump();
      EXPECT_EQ(l["codec"], "none") << l.dump();
      EXPECT_GT(l["rate_mbps"].get<double>(), 1000) << l.dump();
      EXPECT_EQ(l["predicted_step_s_by_codec"].size(), 4u) << l.dump();
    }
  }
  EXPECT_NE(p.err().find("auto: link 0->1 at "), std::string::npos) << p.err();
  EXPECT_NE(p.out().find("auto codec (chosen at its second step"), std::string::npos);
}

TEST(PipelineE2eTest, CompressAutoFlagsAreChecked) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases{
      {{"--compress", "auto", "--compress-min-bits", "12", "--compress-candidates",
        "sortquant:8,kmeans:4"},
       "no candidate has at least 12 bits"},
      {{"--compress", "auto", "--compress-candidates", "none,zip"}, "--compress-candidates"},
      {{"--compress", "auto", "--compress-grad", "fp16"}, "drop --compress-grad"},
  };
  for (const auto& [flags, message] : cases) {
    std::vector<std::string> argv{DTRAIN_BINARY, "train", "--parallel", "pipeline", "-n", "2"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    testing::Process p(argv);
    EXPECT_EQ(p.wait_for(60s), 1) << p.err();
    EXPECT_NE(p.err().find(message), std::string::npos) << p.err();
  }
  testing::Process ddp(
      {DTRAIN_BINARY, "train", "--parallel", "ddp", "-n", "2", "--compress", "auto"});
  EXPECT_EQ(ddp.wait_for(60s), 1);
  EXPECT_NE(ddp.err().find("--compress auto is for --parallel pipeline"), std::string::npos)
      << ddp.err();
}

TEST(PipelineE2eTest, ThreeStagesThroughTheLauncherLearnAndReport) {
  const std::string metrics = "/tmp/dtrain-e2e-pipe-" + std::to_string(getpid()) + ".jsonl";
  testing::Process p(
      {DTRAIN_BINARY,     "train",  "--parallel",   "pipeline", "-n",           "3",
       "--placement",     "ushape", "--model",      "mlp",      "--depth",      "3",
       "--limit-train",   "4000",   "--limit-test", "1000",     "--epochs",     "2",
       "--chunks",        "4",      "--schedule",   "1f1b",     "--compress",   "sortquant:8",
       "--compress-grad", "fp16",   "--metrics",    metrics,    "--no-progress"});
  ASSERT_EQ(p.wait_for(300s), 0) << p.err();
  const auto rows = testing::take_json_lines_file(metrics);
  ASSERT_EQ(rows.size(), 3u);  // two epochs and the summary
  const auto& last = rows[1];
  EXPECT_GT(last["test_acc"].get<double>(), 0.6);  // chance is 0.1
  EXPECT_LT(last["train_loss"].get<double>(), rows[0]["train_loss"].get<double>());
  EXPECT_GT(last["compression_ratio"].get<double>(), 0.25);
  EXPECT_LT(last["compression_ratio"].get<double>(), 1.0);  // server-server links stay plain
  EXPECT_DOUBLE_EQ(last["bubble_ideal"].get<double>(), 2.0 / 6.0);
  EXPECT_GE(last["bubble_measured"].get<double>(), 0.0);
  EXPECT_LE(last["bubble_measured"].get<double>(), 1.0);
  ASSERT_EQ(last["stages"].size(), 3u);
  // U-shape on 3 ranks: 0 -> 1 -> 2 -> 0 forward, the reverse backward; 6 links.
  ASSERT_EQ(last["links"].size(), 6u);
  for (const auto& l : last["links"]) {
    EXPECT_GT(l["bytes"].get<int64_t>(), 0);
    const bool client = l["src"] == 0 || l["dst"] == 0;
    const bool fwd = l["direction"] == "forward";
    const double ratio = l["ratio"].get<double>();
    if (!client)
      EXPECT_GT(ratio, 1.0) << l.dump();  // uncompressed: header overhead only
    else if (fwd)
      EXPECT_LT(ratio, 0.27) << l.dump();
    else
      EXPECT_NEAR(ratio, 0.5, 0.01) << l.dump();
  }
  EXPECT_NE(p.out().find("per link"), std::string::npos);
}

TEST(PipelineE2eTest, KilledStageMakesTheOthersFailClearly) {
  const int port = 31000 + static_cast<int>(getpid() % 1000);
  auto ranks = testing::start_ranks(
      {DTRAIN_BINARY, "train", "--parallel", "pipeline", "--model", "mlp", "--depth", "3",
       "--epochs", "50", "--chunks", "4", "--timeout", "20", "--no-progress", "--threads", "1"},
      3, port);
  testing::kill_and_expect_clear_failures(ranks, 1, 6s, 30s);
}

TEST(PipelineE2eTest, BalanceAutoMeasuresAndCutsEveryRankTheSameWay) {
  testing::Process p({DTRAIN_BINARY, "train", "--parallel", "pipeline", "-n", "2", "--model", "mlp",
                      "--depth", "5", "--balance", "auto", "--limit-train", "512", "--limit-test",
                      "128", "--epochs", "1", "--no-progress"});
  ASSERT_EQ(p.wait_for(300s), 0) << p.err();
  // Both ranks got blocks, and together all six of them.
  const std::string out = p.out();
  for (const char* block : {"fc1", "fc2", "fc3", "fc4", "fc5", "head"})
    EXPECT_NE(out.find(block), std::string::npos) << out;
}

TEST(PipelineE2eTest, BadPipelineFlagsAreClearErrors) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases{
      {{"--parallel", "pipeline", "-n", "2", "--schedule", "zigzag"}, "unknown schedule"},
      {{"--parallel", "pipeline", "-n", "2", "--compress", "uniform:0"}, "bits"},
      {{"--parallel", "pipeline", "-n", "4", "--model", "cnn"}, "too few"},
      {{"--parallel", "pipeline", "-n", "2", "--balance", "1,1"}, "--balance counts add up"},
      {{"-n", "2"}, "needs --parallel pipeline"},
  };
  for (const auto& [flags, message] : cases) {
    std::vector<std::string> args{DTRAIN_BINARY,  "train", "--limit-train", "100",
                                  "--limit-test", "100",   "--timeout",     "20"};
    args.insert(args.end(), flags.begin(), flags.end());
    testing::Process p(args);
    EXPECT_NE(p.wait_for(120s), 0) << flags.back();
    EXPECT_NE(p.err().find(message), std::string::npos) << p.err();
  }
}

}  // namespace
}  // namespace dtrain
