// DiLoCo through the binary: real processes, real Fashion-MNIST.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include "../support/e2e.h"

namespace dtrain {
namespace {

using namespace std::chrono_literals;

// One `dtrain train --parallel diloco` run of the cnn (1 epoch, AdamW 1e-3, 1,000 test
// samples) with `flags`; its epoch row, and its stderr in `err` when asked.
nlohmann::json epoch_row(const std::vector<std::string>& flags, std::string* err = nullptr) {
  static int run = 0;
  const std::string metrics =
      "/tmp/dtrain-e2e-diloco-" + std::to_string(getpid()) + "-" + std::to_string(run++) + ".jsonl";
  std::vector<std::string> args{
      DTRAIN_BINARY,  "train", "--parallel",  "diloco", "--model",      "cnn",
      "--epochs",     "1",     "--optimizer", "adamw",  "--lr",         "1e-3",
      "--limit-test", "1000",  "--metrics",   metrics,  "--no-progress"};
  args.insert(args.end(), flags.begin(), flags.end());
  testing::Process p(args);
  EXPECT_EQ(p.wait_for(300s), 0) << p.err();
  if (err != nullptr) *err = p.err();
  const auto rows = testing::take_json_lines_file(metrics);
  EXPECT_EQ(rows.size(), 2u) << p.err();  // the epoch and the summary
  return rows.empty() ? nlohmann::json::object() : rows[0];
}

TEST(DilocoE2eTest, TwoReplicasWithTwoBitOuterGradientsLearn) {
  const nlohmann::json row = epoch_row(
      {"-n", "2", "--limit-train", "2560", "--sync-every", "5", "--compress-outer", "rot:tile:2"});
  const auto& e = row;
  EXPECT_EQ(e["steps"], 20) << e.dump();
  EXPECT_EQ(e["outer_steps"], 4) << e.dump();
  const auto sent = e["outer_wire_bytes"].get<double>(), fp32 = e["outer_fp32_bytes"].get<double>();
  EXPECT_GT(sent, 0);
  EXPECT_LT(sent, fp32 / 10) << "2-bit codes and their tables: about 1/15 of fp32";
  EXPECT_NEAR(e["wire_bytes_per_sample"].get<double>(), sent / 2560, 1e-6);
  EXPECT_GT(e["compute_utilization"].get<double>(), 0);
  EXPECT_LE(e["compute_utilization"].get<double>(), 1);
  EXPECT_GT(e["test_acc"].get<double>(), 0.6) << e.dump();
}

// Streaming: 4 fragments, each exchanged every 8 steps at offsets 0, 2, 4, 6 and applied
// 2 steps later, beside the inner steps.
TEST(DilocoE2eTest, StreamingFragmentsExchangeBesideTheInnerSteps) {
  const nlohmann::json row =
      epoch_row({"-n", "2", "--limit-train", "2560", "--sync-every", "8", "--fragments", "4",
                 "--sync-delay", "2", "--compress-outer", "sortquant:4"});
  const auto& e = row;
  // 20 steps: eight exchanges start at steps 2, 4, ..., 16 (fragments 1, 2, 3, 0, 1, ...);
  // those due at 18 and 20, fewer than H/2 steps before the epoch's end, wait for it, where
  // every fragment, trained since its last, has one more.
  EXPECT_EQ(e["outer_steps"], 12) << e.dump();
  EXPECT_GT(e["outer_exchange_s"].get<double>(), 0);
  EXPECT_GT(e["outer_hidden_s"].get<double>(), 0) << "exchanges ran beside inner steps";
  EXPECT_LE(e["outer_hidden_s"].get<double>(), e["outer_exchange_s"].get<double>());
  EXPECT_GT(e["test_acc"].get<double>(), 0.5) << e.dump();
}

// 4 ranks as 2 replicas of 2: DDP inside each replica, DiLoCo between them.
TEST(DilocoE2eTest, ReplicasOfTwoRanksTrainAsDdpInsideAndDilocoAcross) {
  const nlohmann::json row =
      epoch_row({"-n", "4", "--ranks-per-replica", "2", "--limit-train", "5120", "--sync-every",
                 "5", "--compress-outer", "sortquant:4"});
  const auto& e = row;
  EXPECT_EQ(e["steps"], 20) << e.dump();  // 5,120 samples over 4 ranks of 64
  EXPECT_EQ(e["outer_steps"], 4) << e.dump();
  EXPECT_GT(e["grad_wire_bytes"].get<double>(), 0) << "DDP inside each replica";
  // Each rank exchanges its half of the cnn's 421,642 values with the other replica: an
  // exact ring of 2 would send 4 bytes a value of it per exchange, where one rank per
  // replica sends twice that.
  EXPECT_NEAR(e["outer_fp32_bytes"].get<double>(), 4 * 4.0 * 421642 / 2, 64) << e.dump();
  EXPECT_LT(e["outer_wire_bytes"].get<double>(), e["outer_fp32_bytes"].get<double>() / 5);
  EXPECT_GT(e["test_acc"].get<double>(), 0.6) << e.dump();
}

// --compress-outer auto on loopback: the exchange is cheap beside the steps, so it stays
// exact, and the row and the log say what was chosen.
TEST(DilocoE2eTest, CompressOuterAutoKeepsTheExactExchangeOnLoopback) {
  std::string err;
  const nlohmann::json row = epoch_row(
      {"-n", "2", "--limit-train", "5120", "--sync-every", "10", "--compress-outer", "auto"}, &err);
  EXPECT_EQ(row["outer_codec"], "none") << row.dump();
  EXPECT_EQ(row["outer_wire_bytes"], row["outer_fp32_bytes"]);
  EXPECT_NE(err.find("--compress-outer auto chose none ("), std::string::npos) << err;
  // 4 exchanges (40 steps): after the first 2 it chooses again from their times, and stays
  // exact.
  EXPECT_NE(err.find("again from its first 2 exchanges"), std::string::npos) << err;
}

// Auto's first exchanges before the link probe has ended on every replica: with H = 1 the
// first comes as the probe starts (beside the first step), so they go with auto's lossiest
// candidate until a vote beside them finds the reading in on both replicas; then it chooses,
// and both change codec at the same exchange (or the exchange's sizes would not match).
TEST(DilocoE2eTest, CompressOuterAutoExchangesWithItsLossiestCandidateUntilTheProbeIsIn) {
  std::string err;
  const nlohmann::json row = epoch_row(
      {"-n", "2", "--limit-train", "5120", "--sync-every", "1", "--compress-outer", "auto"}, &err);
  EXPECT_EQ(row["outer_steps"], 40) << row.dump();
  EXPECT_NE(err.find("--compress-outer auto exchanges with rot:"), std::string::npos) << err;
  EXPECT_NE(err.find("until the link probe's reading is in on every replica"), std::string::npos);
  EXPECT_NE(err.find("--compress-outer auto chose "), std::string::npos) << err;
  EXPECT_NE(row["outer_codec"], "auto") << row.dump();
  EXPECT_GT(row["test_acc"].get<double>(), 0.4) << row.dump();  // chance: 0.1
}

// Streaming under auto: every fragment exchanges on its schedule from the start, as with a
// fixed codec, whether or not the link probe has ended by then (before it has, an exchange
// goes with auto's lossiest candidate). 40 steps, H = 10, F = 5: fragment f > 0 is due at
// 2f, then every 10, fragment 0 at 10, 20, 30, 40; those due at 36, 38 and 40, fewer than
// H/2 steps before the epoch's end, wait for it, where each of the 5 fragments has one more
// (17 + 5).
TEST(DilocoE2eTest, StreamingAutoExchangesEveryFragmentOnItsScheduleFromTheStart) {
  const std::vector<std::string> streaming = {"-n",           "2",  "--limit-train", "5120",
                                              "--sync-every", "10", "--fragments",   "5",
                                              "--sync-delay", "2"};
  auto with = [&](const std::string& codec) {
    std::vector<std::string> args = streaming;
    args.insert(args.end(), {"--compress-outer", codec});
    return args;
  };
  const nlohmann::json fixed = epoch_row(with("none"));
  std::string err;
  const nlohmann::json chosen = epoch_row(with("auto"), &err);
  EXPECT_EQ(fixed["outer_steps"], 22) << fixed.dump();
  EXPECT_EQ(chosen["outer_steps"], 22) << chosen.dump();
  EXPECT_NE(err.find("--compress-outer auto chose none ("), std::string::npos) << err;
}

// A replica killed mid-training, with an exchange running beside the steps: the other
// fails within seconds, naming it, instead of waiting for it.
TEST(DilocoE2eTest, AKilledReplicaMakesTheOtherFailNamingIt) {
  const int port = 31000 + static_cast<int>(getpid() % 1000);
  auto ranks = testing::start_ranks({DTRAIN_BINARY, "train", "--parallel", "diloco", "--model",
                                     "cnn", "--epochs", "20", "--sync-every", "2", "--fragments",
                                     "2", "--sync-delay", "1", "--timeout", "20", "--no-progress"},
                                    2, port);
  testing::kill_and_expect_clear_failures(ranks, 1, 6s, 25s);
}

TEST(DilocoE2eTest, FlagsThatDoNotFitAreRefusedBeforeTraining) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--parallel", "ddp", "--sync-every", "5"}, "are for --parallel diloco"},
      {{"--parallel", "diloco", "--compress-grad", "sortquant:8"}, "--compress-outer"},
      {{"--parallel", "diloco", "--outer-momentum", "1"}, "outer-momentum"},
      {{"--parallel", "ddp", "--fragments", "2"}, "are for --parallel diloco"},
      {{"--parallel", "ddp", "--compress-outer", "auto"}, "--compress-outer auto is for"},
      {{"--parallel", "diloco", "--ranks-per-replica", "3"}, "must divide -n 2 into replicas"},
      {{"--parallel", "diloco", "--sync-every", "10", "--fragments", "2", "--sync-delay", "11"},
       "--sync-delay must be between 0 and --sync-every (10)"},
      {{"--parallel", "diloco", "--no-mid-round-entry"}, "--no-mid-round-entry are for --elastic"},
      {{"--parallel", "diloco", "--elastic", "--fragments", "3"},
       "--elastic with --fragments F needs --sync-every a multiple of F"},
      {{"--parallel", "diloco", "--elastic", "--sync-every", "10", "--fragments", "2",
        "--sync-delay", "5"},
       "at most --sync-every / --fragments - 1 (4)"},
      {{"--parallel", "diloco", "--elastic", "--ranks-per-replica", "3"},
       "--ranks-per-replica 3 must divide -n 2 into replicas"},
      {{"--parallel", "diloco", "--elastic", "--ranks-per-replica", "2", "--join", "127.0.0.1:9"},
       "start the replica's ranks as a job of 2"},
  };
  for (const auto& [flags, message] : cases) {
    std::vector<std::string> args{DTRAIN_BINARY, "train", "-n", "2", "--limit-train", "256"};
    args.insert(args.end(), flags.begin(), flags.end());
    testing::Process p(args);
    EXPECT_NE(p.wait_for(120s), 0) << flags[1];
    EXPECT_NE(p.err().find(message), std::string::npos) << p.err();
  }
}

}  // namespace
}  // namespace dtrain
