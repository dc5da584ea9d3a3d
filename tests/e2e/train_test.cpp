// A short real training on Fashion-MNIST (from the Debian package) through the binary.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <torch/version.h>

#include <fstream>

#include "../support/process.h"

namespace dtrain {
namespace {

using namespace std::chrono_literals;

TEST(TrainE2eTest, FashionMnistLossFallsAndAccuracyBeatsChance) {
  const std::string metrics = "/tmp/dtrain-e2e-train-" + std::to_string(getpid()) + ".jsonl";
  testing::Process p({DTRAIN_BINARY, "train", "--model", "cnn", "--dataset", "fashion-mnist",
                      "--limit-train", "3000", "--limit-test", "1000", "--epochs", "2", "--metrics",
                      metrics, "--format", "jsonl"});
  ASSERT_EQ(p.wait_for(300s), 0) << p.err();
  std::ifstream in(metrics);
  std::vector<nlohmann::json> rows;
  for (std::string line; std::getline(in, line);)
    rows.push_back(nlohmann::json::parse(line));
  std::remove(metrics.c_str());
  ASSERT_EQ(rows.size(), 3u);  // two epochs and the summary
  for (const char* key :
       {"epoch", "train_loss", "train_acc", "test_loss", "test_acc", "samples_per_s", "time_data_s",
        "time_forward_s", "time_backward_s", "time_optimizer_s", "time_comm_s", "peak_rss_bytes"}) {
    EXPECT_TRUE(rows[0].contains(key)) << key;
  }
  EXPECT_LT(rows[1]["train_loss"].get<double>(), rows[0]["train_loss"].get<double>());
  EXPECT_GT(rows[1]["test_acc"].get<double>(), 0.6);  // chance is 0.1
  EXPECT_TRUE(rows[2]["summary"].get<bool>());
}

TEST(TrainE2eTest, MissingDataAndBadFlagsAreClearErrors) {
  testing::Process a(
      {DTRAIN_BINARY, "train", "--dataset", "cifar10", "--data-dir", "/nonexistent"});
  EXPECT_EQ(a.wait_for(60s), 1);
  EXPECT_NE(a.err().find("missing /nonexistent/data_batch_1.bin"), std::string::npos) << a.err();
  testing::Process b({DTRAIN_BINARY, "train", "--model", "vgg"});
  EXPECT_EQ(b.wait_for(60s), 1);
  EXPECT_NE(b.err().find("unknown model 'vgg'"), std::string::npos) << b.err();
  testing::Process c(
      {DTRAIN_BINARY, "train", "-n", "2", "--parallel", "pipeline", "--backend", "nccl"});
  EXPECT_EQ(c.wait_for(60s), 1);
  EXPECT_NE(c.err().find("--backend nccl is for --parallel ddp"), std::string::npos) << c.err();
  // Refused before any rank starts: DDP's CPU tensors have no NCCL to go to.
  testing::Process d({DTRAIN_BINARY, "train", "-n", "2", "--parallel", "ddp", "--backend", "nccl"});
  EXPECT_EQ(d.wait_for(60s), 1);
  EXPECT_NE(d.err().find("--backend nccl reduces CUDA tensors: it needs --device cuda"),
            std::string::npos)
      << d.err();
  EXPECT_EQ(d.err().find("[rank"), std::string::npos) << d.err();
}

TEST(VersionE2eTest, NamesDtrainLibTorchCudaAndNccl) {
  testing::Process p({DTRAIN_BINARY, "--version"});
  ASSERT_EQ(p.wait_for(60s), 0) << p.err();
  const std::string out = p.out();
  EXPECT_EQ(out.rfind("dtrain ", 0), 0u) << out;
  EXPECT_NE(out.find(std::string("LibTorch ") + TORCH_VERSION), std::string::npos) << out;
  EXPECT_NE(out.find("CUDA in LibTorch:"), std::string::npos) << out;
  EXPECT_NE(out.find("NCCL in LibTorch:"), std::string::npos) << out;
  EXPECT_NE(out.find("dtrain NCCL backend:"), std::string::npos) << out;
  EXPECT_NE(out.find("CUDA devices now:"), std::string::npos) << out;
}

// A word that names no command is named back with the commands there are, --help or not;
// a real command's --help still prints its help.
TEST(CommandE2eTest, AWordThatNamesNoCommandIsAClearError) {
  testing::Process a({DTRAIN_BINARY, "diloco", "--help"});
  EXPECT_EQ(a.wait_for(60s), 1);
  EXPECT_NE(a.err().find("'diloco' is not a command of dtrain (its commands: train,"),
            std::string::npos)
      << a.err();
  EXPECT_EQ(a.out(), "");
  testing::Process b({DTRAIN_BINARY, "bench", "collectiv"});
  EXPECT_EQ(b.wait_for(60s), 1);
  EXPECT_NE(b.err().find("'collectiv' is not a command of dtrain bench (its commands: "
                         "collective, p2p,"),
            std::string::npos)
      << b.err();
  testing::Process c({DTRAIN_BINARY, "netlab", "sideways"});
  EXPECT_EQ(c.wait_for(60s), 1);
  EXPECT_NE(c.err().find("'sideways' is not a command of dtrain netlab"), std::string::npos)
      << c.err();
  testing::Process d({DTRAIN_BINARY, "bench", "collective", "--help"});
  EXPECT_EQ(d.wait_for(60s), 0) << d.err();
  EXPECT_NE(d.out().find("Usage:"), std::string::npos) << d.out();
}

}  // namespace
}  // namespace dtrain
