// Faults a real job meets, through the binary: a hung (SIGSTOPped) rank, a disk that fills
// while a checkpoint is written, a corrupt shard of another rank. Each ends with every
// rank exiting non-zero with a message naming the cause, and nothing good lost.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <signal.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "../support/e2e.h"
#include "dtrain/comm/launch.h"

namespace dtrain {
namespace {

using namespace std::chrono_literals;
using testing::Process;

const std::vector<std::string> kSmallTraining{DTRAIN_BINARY,  "train", "--model",      "mlp",
                                              "--depth",      "3",     "--batch-size", "64",
                                              "--limit-test", "128",   "--no-progress"};

std::vector<std::string> with(std::vector<std::string> argv, const std::vector<std::string>& more) {
  argv.insert(argv.end(), more.begin(), more.end());
  return argv;
}

// A rank that stops answering (SIGSTOP: alive, silent) must not hold the others: each
// fails within its --timeout, its message leading to the silent rank (directly, or
// through the rank that failed first).
TEST(FaultsTest, AHungRankMakesTheOthersFailWithinTheTimeout) {
  const int port = comm::pick_free_port();
  auto ranks = testing::start_ranks(
      with(kSmallTraining, {"--parallel", "pipeline", "--epochs", "50", "--timeout", "5"}), 3,
      port);
  std::this_thread::sleep_for(4s);
  for (auto& r : ranks)
    ASSERT_EQ(r->wait_for(0s), -1) << "a rank ended early: " << r->err();
  kill(ranks[2]->pid(), SIGSTOP);
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < 2; ++r) {
    const int code = ranks[static_cast<size_t>(r)]->wait_for(60s);
    EXPECT_NE(code, -1) << "rank " << r << " hangs";
    EXPECT_NE(code, 0) << "rank " << r;
    const std::string err = ranks[static_cast<size_t>(r)]->err();
    EXPECT_NE(err.find("dtrain: error:"), std::string::npos) << err;
    EXPECT_NE(err.find("failed after 5"), std::string::npos) << err;
    EXPECT_NE(err.find("rank 2 exited, crashed or stopped responding"), std::string::npos) << err;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 30s);
  kill(ranks[2]->pid(), SIGKILL);
}

// A full disk while writing the second checkpoint: the run fails saying so, and the first
// checkpoint is intact (a resume loads it, every shard checked).
TEST(FaultsTest, ADiskFullWhileCheckpointingKeepsTheLastGoodOne) {
  if (geteuid() != 0) GTEST_SKIP() << "mounting a small tmpfs needs root";
  const std::string probe = testing::temp_dir("dtrain-e2e-faults");
  Process sizing(
      with(kSmallTraining, {"--limit-train", "640", "--epochs", "1", "--checkpoint-dir", probe}));
  ASSERT_EQ(sizing.wait_for(120s), 0) << sizing.err();
  const int64_t shard = testing::checkpoint_manifest(probe)["shards"][0]["bytes"].get<int64_t>();
  // Room for one checkpoint and the manifest, not for a second shard beside the first.
  const std::string disk = testing::temp_dir("dtrain-e2e-faults");
  const std::string options = "size=" + std::to_string((shard * 3 / 2 / 4096 + 1) * 4096);
  ASSERT_EQ(mount("tmpfs", disk.c_str(), "tmpfs", 0, options.c_str()), 0) << strerror(errno);
  Process full(
      with(kSmallTraining, {"--limit-train", "640", "--epochs", "3", "--checkpoint-dir", disk}));
  EXPECT_EQ(full.wait_for(120s), 1) << full.err();
  EXPECT_NE(full.err().find("checkpoint at epoch 2 end failed"), std::string::npos) << full.err();
  EXPECT_NE(full.err().find("No space left on device"), std::string::npos) << full.err();
  EXPECT_NE(full.err().find("the last committed checkpoint in " + disk + " is intact"),
            std::string::npos)
      << full.err();
  EXPECT_EQ(testing::checkpoint_manifest(disk)["epoch"], 1);
  Process resume(with(kSmallTraining, {"--limit-train", "640", "--epochs", "1", "--checkpoint-dir",
                                       disk, "--resume"}));
  EXPECT_EQ(resume.wait_for(120s), 0) << resume.err();  // epoch 1 of 1 done: loads, checks
  umount(disk.c_str());
}

// Only rank 1 fails to write its shard (a directory stands where it goes): the job fails
// on every rank, and every rank's shard of the committed checkpoint stays, with the
// shards of the failed attempt removed.
TEST(FaultsTest, AShardOneRankCannotWriteKeepsEveryRanksLastCheckpoint) {
  const std::string dir = testing::temp_dir("dtrain-e2e-faults");
  ASSERT_EQ(mkdir((dir + "/shard-r1-e2-s0.safetensors").c_str(), 0755), 0);
  Process p(with(kSmallTraining, {"--parallel", "pipeline", "-n", "2", "--limit-train", "640",
                                  "--epochs", "2", "--checkpoint-dir", dir}));
  EXPECT_EQ(p.wait_for(120s), 1) << p.err();
  EXPECT_NE(p.err().find("[rank 0] dtrain: error: checkpoint at epoch 2 end failed: rank 1 could "
                         "not write its part"),
            std::string::npos)
      << p.err();
  const auto m = testing::checkpoint_manifest(dir);
  EXPECT_EQ(m["epoch"], 1);
  for (const auto& shard : m["shards"])
    EXPECT_EQ(access((dir + "/" + shard["file"].get<std::string>()).c_str(), F_OK), 0) << shard;
  EXPECT_NE(access((dir + "/shard-r0-e2-s0.safetensors").c_str(), F_OK), 0);
}

// Rank 1's shard corrupted on disk: resuming fails on every rank, rank 1 naming its file.
TEST(FaultsTest, ACorruptShardOfAnotherRankIsNamedOnEveryRank) {
  const std::string dir = testing::temp_dir("dtrain-e2e-faults");
  const auto run = with(kSmallTraining, {"--parallel", "pipeline", "-n", "2", "--limit-train",
                                         "640", "--epochs", "2", "--checkpoint-dir", dir});
  Process first(with(run, {"--stop-after", "1"}));
  ASSERT_EQ(first.wait_for(120s), 0) << first.err();
  const std::string shard =
      dir + "/" + testing::checkpoint_manifest(dir)["shards"][1]["file"].get<std::string>();
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(200);
    const char byte = static_cast<char>(f.get() ^ 0x01);
    f.seekp(200);
    f.put(byte);
  }
  Process resume(with(run, {"--resume"}));
  EXPECT_EQ(resume.wait_for(120s), 1) << resume.err();
  EXPECT_NE(resume.err().find("[rank 1] dtrain: error: checkpoint shard " + shard + " is corrupt"),
            std::string::npos)
      << resume.err();
  EXPECT_NE(resume.err().find("[rank 0] dtrain: error: rank 1 could not restore its checkpoint"),
            std::string::npos)
      << resume.err();
}

}  // namespace
}  // namespace dtrain
