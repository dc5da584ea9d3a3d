// Checkpoints of multi-rank jobs through the binary: a pipeline and DDP (exact and with
// compressed gradients) stopped inside an epoch and resumed, and a pipeline rank killed and
// restarted, end in exactly the state of an uninterrupted run (the manifests' state_crc32c: every
// rank's parameters, buffers, optimizer state and generator, bit for bit), and a checkpoint is
// refused by a job of another layout.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>

#include "../support/e2e.h"

namespace dtrain {
namespace {

using namespace std::chrono_literals;
using testing::Process;

// 640 training samples unless `mode` names its own --limit-train.
std::vector<std::string> run_args(const std::vector<std::string>& mode, const std::string& dir,
                                  const std::vector<std::string>& extra) {
  std::vector<std::string> argv{DTRAIN_BINARY,
                                "train",
                                "--model",
                                "mlp",
                                "--depth",
                                "3",
                                "--limit-test",
                                "128",
                                "--epochs",
                                "2",
                                "--batch-size",
                                "64",
                                "--checkpoint-dir",
                                dir,
                                "--no-progress",
                                "--timeout",
                                "60"};
  if (std::find(mode.begin(), mode.end(), "--limit-train") == mode.end())
    argv.insert(argv.end(), {"--limit-train", "640"});
  argv.insert(argv.end(), mode.begin(), mode.end());
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

// Stopped after step 3 of epoch 2 (or of the first epoch where `first_epoch`; a checkpoint
// every 3 steps): `stop` steps in all.
void expect_interrupted_equals_whole(const std::vector<std::string>& mode, int ranks,
                                     const std::string& stop, bool first_epoch = false) {
  const std::string whole = testing::temp_dir("dtrain-e2e-ckpt"),
                    part = testing::temp_dir("dtrain-e2e-ckpt");
  Process a(run_args(mode, whole, {}));
  ASSERT_EQ(a.wait_for(300s), 0) << a.err();
  Process b(run_args(mode, part, {"--checkpoint-every", "3", "--stop-after-steps", stop}));
  ASSERT_EQ(b.wait_for(300s), 0) << b.err();
  const auto stopped = testing::checkpoint_manifest(part);
  EXPECT_EQ(stopped["epoch"], first_epoch ? 0 : 1);
  EXPECT_EQ(stopped["step"], 3);
  ASSERT_EQ(stopped["shards"].size(), static_cast<size_t>(ranks));
  Process c(run_args(mode, part, {"--checkpoint-every", "3", "--resume"}));
  ASSERT_EQ(c.wait_for(300s), 0) << c.err();
  const auto x = testing::checkpoint_manifest(whole), y = testing::checkpoint_manifest(part);
  EXPECT_EQ(y["epoch"], 2);
  EXPECT_EQ(y["step"], 0);
  ASSERT_EQ(x["shards"].size(), y["shards"].size());
  for (size_t r = 0; r < x["shards"].size(); ++r)
    EXPECT_EQ(x["shards"][r]["state_crc32c"], y["shards"][r]["state_crc32c"]) << "rank " << r;
}

TEST(CheckpointE2eTest, PipelineStoppedMidEpochAndResumedEqualsUninterrupted) {
  expect_interrupted_equals_whole({"--parallel", "pipeline", "-n", "3"}, 3, "13");  // 10 a epoch
}

TEST(CheckpointE2eTest, DdpStoppedMidEpochAndResumedEqualsUninterrupted) {
  expect_interrupted_equals_whole({"--parallel", "ddp", "-n", "2"}, 2, "8");  // 5 an epoch
}

// DDP's replicas are alike: rank 1's shard holds its generator and position, not a second
// copy of the model and optimizer state (the resume above gets them from rank 0).
TEST(CheckpointE2eTest, DdpKeepsOneCopyOfTheModel) {
  const std::string dir = testing::temp_dir("dtrain-e2e-ckpt");
  Process run(run_args({"--parallel", "ddp", "-n", "2"}, dir, {"--stop-after", "1"}));
  ASSERT_EQ(run.wait_for(300s), 0) << run.err();
  const auto shards = testing::checkpoint_manifest(dir)["shards"];
  ASSERT_EQ(shards.size(), 2u);
  // The mlp's parameters and momentum: about 10 MB; a generator and a position: kilobytes.
  EXPECT_GT(shards[0]["bytes"].get<int64_t>(), 1'000'000);
  EXPECT_LT(shards[1]["bytes"].get<int64_t>(), 100'000);
}

// A lossy codec's residuals are owed to the next steps: the resumed run must owe them too.
TEST(CheckpointE2eTest, CompressedDdpResumesWithItsErrorFeedbackResiduals) {
  const std::vector<std::string> mode{"--parallel",      "ddp",        "-n", "2",
                                      "--compress-grad", "sortquant:4"};
  expect_interrupted_equals_whole(mode, 2, "8");
  // The residuals belong to the buckets' pieces: other buckets are refused with the reason.
  const std::string dir = testing::temp_dir("dtrain-e2e-ckpt");
  Process stop(run_args(mode, dir, {"--checkpoint-every", "3", "--stop-after-steps", "3"}));
  ASSERT_EQ(stop.wait_for(300s), 0) << stop.err();
  Process other(run_args(mode, dir, {"--resume", "--bucket-mb", "0.5"}));
  EXPECT_NE(other.wait_for(300s), 0);
  EXPECT_NE(other.err().find("error-feedback residual"), std::string::npos) << other.err();
}

// DiLoCo stopped inside a round (an outer step every 2 steps, 5 steps an epoch, stopped
// after 8): each replica's own parameters and inner optimizer, the shared parameters, the
// outer momentum and the 4-bit exchange's residuals all carry over.
TEST(CheckpointE2eTest, DilocoStoppedInsideARoundAndResumedEqualsUninterrupted) {
  expect_interrupted_equals_whole(
      {"--parallel", "diloco", "-n", "2", "--sync-every", "2", "--compress-outer", "sortquant:4"},
      2, "8");
}

// DiLoCo stopped where an outer step waits for the epoch's end (H = 3, 4 steps an epoch:
// the one due after step 3 comes with step 4's end of epoch; stopped after step 3 of the
// second epoch): the checkpoint holds a round of 3 steps with its outer step still to come.
TEST(CheckpointE2eTest, DilocoStoppedWhileAnOuterStepWaitsForTheEpochsEndEqualsUninterrupted) {
  expect_interrupted_equals_whole({"--parallel", "diloco", "-n", "2", "--limit-train", "512",
                                   "--sync-every", "3", "--compress-outer", "sortquant:4"},
                                  2, "7");
}

// Streaming DiLoCo stopped while an exchange is in flight (2 fragments, offsets 0 and 2 of
// every 4 steps, each applied 2 steps after it starts: fragment 1's, started at the second
// epoch's step 2, is due at its step 4 and the run stops at step 3): the settled result
// and its due step carry over too.
TEST(CheckpointE2eTest, StreamingDilocoStoppedWithAnExchangeInFlightEqualsUninterrupted) {
  expect_interrupted_equals_whole(
      {"--parallel", "diloco", "-n", "2", "--sync-every", "4", "--fragments", "2", "--sync-delay",
       "2", "--compress-outer", "sortquant:4"},
      2, "8");
}

// Streaming DiLoCo with --compress-outer auto (the only candidate none, so both runs choose
// alike) stopped at step 3, a checkpoint every 3 steps, before the first exchange (H = 8, at
// the first epoch's end): its link probe runs beside those steps, and the checkpoint's own
// collectives wait for it (Diloco::settle). The resumed run probes again and chooses, and
// ends as the uninterrupted run does.
TEST(CheckpointE2eTest, DilocoStoppedWhileAutoProbesTheLinkAndResumedEqualsUninterrupted) {
  expect_interrupted_equals_whole(
      {"--parallel", "diloco", "-n", "2", "--sync-every", "8", "--fragments", "2", "--sync-delay",
       "2", "--compress-outer", "auto", "--compress-candidates", "none"},
      2, "3", /*first_epoch=*/true);
}

std::vector<pid_t> children_of(pid_t parent) {
  std::ifstream in("/proc/" + std::to_string(parent) + "/task/" + std::to_string(parent) +
                   "/children");
  std::vector<pid_t> pids;
  for (pid_t pid = 0; in >> pid;)
    pids.push_back(pid);
  return pids;
}

// A pipeline rank killed with SIGKILL after a mid-epoch checkpoint: the launcher restarts
// every rank, they resume from the checkpoint, and the run ends with shards
// byte-identical to an uninterrupted run's.
TEST(CheckpointE2eTest, KilledPipelineRankRestartsAndEndsAsUninterrupted) {
  const std::vector<std::string> mode{"--parallel", "pipeline",           "-n",
                                      "3",          "--checkpoint-every", "2"};
  const std::string whole = testing::temp_dir("dtrain-e2e-ckpt"),
                    part = testing::temp_dir("dtrain-e2e-ckpt");
  Process a(run_args(mode, whole, {"--resume"}));
  ASSERT_EQ(a.wait_for(300s), 0) << a.err();
  Process b(run_args(mode, part, {"--resume", "--max-restarts", "1"}));
  bool killed = false;
  for (int i = 0; i < 3000 && !killed && b.wait_for(0s) == -1; ++i) {
    std::this_thread::sleep_for(10ms);
    std::ifstream in(part + "/manifest.json");
    if (!in) continue;
    const auto pids = children_of(b.pid());
    if (pids.size() == 3) killed = kill(pids[1], SIGKILL) == 0;
  }
  ASSERT_TRUE(killed) << "the run ended before a checkpoint could be interrupted: " << b.err();
  ASSERT_EQ(b.wait_for(300s), 0) << b.err();
  EXPECT_NE(b.err().find("restarting every rank (restart 1 of 1"), std::string::npos) << b.err();
  const auto x = testing::checkpoint_manifest(whole), y = testing::checkpoint_manifest(part);
  ASSERT_EQ(x["shards"].size(), y["shards"].size());
  for (size_t r = 0; r < x["shards"].size(); ++r)
    EXPECT_EQ(x["shards"][r]["state_crc32c"], y["shards"][r]["state_crc32c"]) << "rank " << r;
}

TEST(CheckpointE2eTest, AnotherLayoutIsRefusedWithTheReason) {
  const std::string dir = testing::temp_dir("dtrain-e2e-ckpt");
  Process a(run_args({"--parallel", "pipeline", "-n", "3"}, dir, {"--stop-after", "1"}));
  ASSERT_EQ(a.wait_for(300s), 0) << a.err();
  Process b(run_args({"--parallel", "pipeline", "-n", "2"}, dir, {"--resume"}));
  EXPECT_EQ(b.wait_for(300s), 1) << b.err();
  EXPECT_NE(b.err().find("was written by a pipeline over 3 ranks"), std::string::npos) << b.err();
  EXPECT_NE(b.err().find("this run is a pipeline over 2 ranks"), std::string::npos) << b.err();
}

}  // namespace
}  // namespace dtrain
