// Nobody let in, nothing corrupted used: the rendezvous token, the store's listening
// address, a taken port, and bytes corrupted on a real connection, through the binary.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <set>
#include <string>

#include "../support/e2e.h"
#include "../support/sockets.h"
#include "dtrain/base/crc32c.h"
#include "dtrain/comm/launch.h"

namespace dtrain {
namespace {

using namespace std::chrono_literals;
using testing::Process;
using Env = std::vector<std::pair<std::string, std::string>>;

Env rank_env(int rank, int world, int port, Env extra = {}) {
  Env env{{"RANK", std::to_string(rank)},
          {"WORLD_SIZE", std::to_string(world)},
          {"MASTER_ADDR", "127.0.0.1"},
          {"MASTER_PORT", std::to_string(port)}};
  env.insert(env.end(), extra.begin(), extra.end());
  return env;
}

const std::vector<std::string> kSmallP2p{DTRAIN_BINARY, "bench", "p2p",       "--sizes", "1K",
                                         "--iters",     "2",     "--timeout", "20"};

TEST(TokenTest, ADifferentTokenIsRefusedOnBothSides) {
  const int port = comm::pick_free_port();
  Process host(kSmallP2p, rank_env(0, 2, port, {{"DTRAIN_TOKEN", "alpha"}}));
  Process stray(kSmallP2p, rank_env(1, 2, port, {{"DTRAIN_TOKEN", "beta"}}));
  EXPECT_EQ(host.wait_for(60s), 1) << host.err();
  EXPECT_EQ(stray.wait_for(60s), 1) << stray.err();
  EXPECT_NE(host.err().find("rank 1 presented a different token: refused"), std::string::npos)
      << host.err();
  EXPECT_NE(stray.err().find("rank 0 holds a different token: refusing to join"), std::string::npos)
      << stray.err();
  // A process without any token is a different token too.
  const int port2 = comm::pick_free_port();
  Process host2(kSmallP2p, rank_env(0, 2, port2, {{"DTRAIN_TOKEN", "alpha"}}));
  Process none(kSmallP2p, rank_env(1, 2, port2));
  EXPECT_EQ(host2.wait_for(60s), 1) << host2.err();
  EXPECT_EQ(none.wait_for(60s), 1) << none.err();
}

TEST(TokenTest, TheSameTokenJoinsThroughTheLauncher) {
  std::vector<std::string> argv{DTRAIN_BINARY, "bench", "p2p", "-n", "2", "--token", "s3cret"};
  argv.insert(argv.end(), kSmallP2p.begin() + 3, kSmallP2p.end());
  Process p(argv);
  EXPECT_EQ(p.wait_for(60s), 0) << p.err();
}

bool accepts(const char* address, int port) {
  return testing::connect_error(address, port) == 0;
}

// Rank 0 waits for a rank 1 that never comes; meanwhile its store must be reachable on
// 127.0.0.1 (the address it was given) and not on 127.0.0.2 (another address of this host).
TEST(RendezvousE2eTest, TheStoreListensOnlyOnMasterAddr) {
  const int port = comm::pick_free_port();
  std::vector<std::string> short_wait = kSmallP2p;
  short_wait.back() = "3";  // --timeout: rank 1 never comes
  Process host(short_wait, rank_env(0, 2, port));
  bool up = false;
  for (int i = 0; i < 500 && !up; ++i) {
    std::this_thread::sleep_for(20ms);
    up = accepts("127.0.0.1", port);
  }
  ASSERT_TRUE(up) << host.err();
  EXPECT_FALSE(accepts("127.0.0.2", port));
  EXPECT_EQ(host.wait_for(60s), 1) << host.err();
  EXPECT_NE(host.err().find("rank 1 did not join"), std::string::npos) << host.err();
}

TEST(RendezvousE2eTest, ATakenPortIsAClearError) {
  const int port = comm::pick_free_port();
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &at.sin_addr);
  ASSERT_EQ(bind(fd, reinterpret_cast<const sockaddr*>(&at), sizeof(at)), 0);
  ASSERT_EQ(listen(fd, 4), 0);
  Process host(kSmallP2p, rank_env(0, 2, port));
  EXPECT_EQ(host.wait_for(60s), 1) << host.err();
  EXPECT_NE(host.err().find("127.0.0.1:" + std::to_string(port) + ": the port is already in use"),
            std::string::npos)
      << host.err();
  close(fd);
}

// A bit flipped on rank 0's connection (an LD_PRELOAD library rewrites one socket write):
// the receiver names the link and the message, and every rank fails instead of training on.
TEST(WireCheckE2eTest, BytesCorruptedOnAConnectionAreCaughtAndNamed) {
  const int port = comm::pick_free_port();
  const std::vector<std::string> train{
      DTRAIN_BINARY, "train",    "--parallel", "pipeline",  "--model", "mlp",          "--dataset",
      "synthetic",   "--epochs", "1",          "--timeout", "30",      "--no-progress"};
  Process rank0(train, rank_env(0, 2, port,
                                {{"LD_PRELOAD", DTRAIN_CORRUPT_WRITES},
                                 {"DTRAIN_CORRUPT_AFTER_BYTES", "300000"}}));
  Process rank1(train, rank_env(1, 2, port));
  const int code1 = rank1.wait_for(120s);
  const int code0 = rank0.wait_for(120s);
  EXPECT_NE(code1, -1) << "rank 1 hangs";
  EXPECT_NE(code0, -1) << "rank 0 hangs";
  EXPECT_NE(code1, 0);
  EXPECT_NE(code0, 0);
  EXPECT_NE(rank1.err().find("arrived corrupted on the link rank 0 -> rank 1"), std::string::npos)
      << rank1.err();
  EXPECT_NE(rank1.err().find("pipeline message"), std::string::npos) << rank1.err();
  EXPECT_NE(rank0.err().find("rank 1"), std::string::npos) << rank0.err();
}

// Both framings of the check (docs/wire-format.md): a 64 KiB message carries it appended,
// an 8 MiB one goes in 4 MiB pieces followed by it.
TEST(WireCheckE2eTest, BothFramingsCatchAFlippedBit) {
  for (const char* size : {"64K", "8M"}) {
    const int port = comm::pick_free_port();
    const std::vector<std::string> p2p{DTRAIN_BINARY, "bench", "p2p",       "--sizes", size,
                                       "--iters",     "2",     "--timeout", "20"};
    Process sender(p2p, rank_env(0, 2, port,
                                 {{"LD_PRELOAD", DTRAIN_CORRUPT_WRITES},
                                  {"DTRAIN_CORRUPT_AFTER_BYTES", "0"}}));
    Process receiver(p2p, rank_env(1, 2, port));
    EXPECT_EQ(receiver.wait_for(60s), 1) << size << receiver.err();
    EXPECT_NE(sender.wait_for(60s), 0) << size;
    EXPECT_NE(receiver.err().find("benchmark message (tag"), std::string::npos) << receiver.err();
    EXPECT_NE(receiver.err().find("arrived corrupted on the link rank 0 -> rank 1"),
              std::string::npos)
        << size << receiver.err();
  }
}

// Two ranks, rank 0 with `variable`=0 and rank 1 without it: the rendezvous refuses both,
// rank 0 naming the variable; and `variable`=maybe alone is an error naming the value.
void expect_ranks_must_agree_on(const std::string& variable) {
  const int port = comm::pick_free_port();
  Process a(kSmallP2p, rank_env(0, 2, port, {{variable, "0"}}));
  Process b(kSmallP2p, rank_env(1, 2, port));
  EXPECT_EQ(a.wait_for(60s), 1) << a.err();
  EXPECT_EQ(b.wait_for(60s), 1) << b.err();
  EXPECT_NE(a.err().find(variable + " must be the same on every rank"), std::string::npos)
      << a.err();
  Process c(kSmallP2p, rank_env(0, 1, comm::pick_free_port(), {{variable, "maybe"}}));
  EXPECT_NE(c.wait_for(60s), 0);
  EXPECT_NE(c.err().find(variable + "='maybe' is not 1, 0, on or off"), std::string::npos)
      << c.err();
}

TEST(WireCheckE2eTest, RanksMustAgreeOnTheWireCheck) {
  expect_ranks_must_agree_on("DTRAIN_WIRE_CHECK");
}

// Openings are set at connect from DTRAIN_OPENINGS (comm/world.h).
TEST(WireCheckE2eTest, RanksMustAgreeOnOpenings) {
  expect_ranks_must_agree_on("DTRAIN_OPENINGS");
}

// --measure-wire-check switches the check on every rank between steps (both framings: the
// cnn's 400 KB activations go in pieces, the mlp's small ones inline): no message is
// misread across a switch, and no number changes, against the same run without it. The
// mlp's chain of 3 has a link between two followers.
TEST(WireCheckE2eTest, MeasuringTheCheckSwitchesEveryRankAndChangesNoNumber) {
  for (const std::string model : {"cnn", "mlp"}) {
    std::vector<nlohmann::json> finals;
    for (const bool measure : {false, true}) {
      const std::string metrics = "/tmp/dtrain-e2e-wcab-" + std::to_string(getpid()) + ".jsonl";
      std::vector<std::string> args{DTRAIN_BINARY,  "train", "--parallel",    "pipeline",
                                    "--model",      model,   "--limit-train", "1600",
                                    "--limit-test", "200",   "--epochs",      "1",
                                    "--chunks",     "4",     "--threads",     "1",
                                    "--metrics",    metrics, "--no-progress"};
      if (model == "cnn")
        args.insert(args.end(), {"-n", "2", "--placement", "ushape"});
      else
        args.insert(args.end(), {"-n", "3"});
      if (measure) args.push_back("--measure-wire-check");
      testing::Process p(args);
      ASSERT_EQ(p.wait_for(300s), 0) << p.err();
      const auto rows = testing::take_json_lines_file(metrics);
      ASSERT_EQ(rows.size(), 2u);
      const auto& epoch = rows[0];
      EXPECT_EQ(epoch.contains("wire_check_cost"), measure) << epoch.dump();
      if (measure) {
        EXPECT_EQ(epoch["wire_check_pairs"].get<int64_t>(), 11) << epoch.dump();  // 25 steps
        EXPECT_GT(epoch["step_s_check_off"].get<double>(), 0);
        EXPECT_GT(epoch["step_s_check_on"].get<double>(), 0);
        EXPECT_GT(epoch["wire_check_cost_ci95"].get<double>(), 0);
        EXPECT_NE(p.out().find("check cost"), std::string::npos) << p.out();
      }
      finals.push_back(rows[1]);
    }
    EXPECT_EQ(finals[0]["final_test_loss"], finals[1]["final_test_loss"]) << model;
    EXPECT_EQ(finals[0]["final_test_acc"], finals[1]["final_test_acc"]) << model;
  }
}

TEST(WireCheckE2eTest, MeasuringTheCheckIsForPipelines) {
  testing::Process p({DTRAIN_BINARY, "train", "--measure-wire-check", "--epochs", "1"});
  EXPECT_NE(p.wait_for(30s), 0);
  EXPECT_NE(p.err().find("--measure-wire-check is for --parallel pipeline"), std::string::npos)
      << p.err();
}

// bench checksum: a row per op and kernel this CPU has (and the baselines), each a real
// rate; a malformed size is refused with a message, not measured.
TEST(ChecksumBenchTest, EveryKernelOfThisCpuIsMeasuredAndBadSizesAreRefused) {
  testing::Process p(
      {DTRAIN_BINARY, "bench", "checksum", "--sizes", "64K", "--reps", "1", "--format", "jsonl"});
  ASSERT_EQ(p.wait_for(60s), 0) << p.err();
  const auto rows = testing::json_lines(p.out());
  const size_t kernels = static_cast<size_t>(crc32c_kernel()) + 1;
  ASSERT_EQ(rows.size(), 2 + 3 * kernels) << p.out();
  std::set<std::string> seen;
  for (const auto& row : rows) {
    EXPECT_EQ(row.at("bench"), "checksum");
    EXPECT_EQ(row.at("bytes"), 65536);
    EXPECT_GT(row.at("bandwidth_gbps").get<double>(), 0.0) << row;
    seen.insert(row.at("op").get<std::string>() + " " + row.at("impl").get<std::string>());
  }
  EXPECT_TRUE(seen.count("crc tables") && seen.count("crc+sum tables") && seen.count("copy none"));
  EXPECT_TRUE(seen.count(std::string("crc+copy ") + to_string(crc32c_kernel())));
  testing::Process bad({DTRAIN_BINARY, "bench", "checksum", "--sizes", "12Q"});
  EXPECT_EQ(bad.wait_for(60s), 1) << bad.err();
  EXPECT_NE(bad.err().find("12Q"), std::string::npos) << bad.err();
}

}  // namespace
}  // namespace dtrain
