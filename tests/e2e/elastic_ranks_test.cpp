// Elastic DiLoCo with replicas of several ranks (--ranks-per-replica 2, docs/elastic.md):
// three replicas of two ranks each on the cnn, through the binary and its launcher. A rank's
// death, the replica's leader's (by fault plan) or a follower's (SIGKILL from here), takes
// its replica out, not the run; the launcher starts the replica's ranks again together and
// the replica joins.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <thread>

#include "../support/e2e.h"
#include "../support/elastic.h"

namespace dtrain {
namespace {

using namespace std::chrono_literals;

using testing::ElasticRun;

std::string base_path() {
  static int count = 0;
  return "/tmp/dtrain-e2e-elastic-ranks-" + std::to_string(getpid()) + "-" +
         std::to_string(count++);
}

std::vector<std::string> command(const std::string& base, int64_t samples, const std::string& plan,
                                 int ranks = 6, int sync_every = 5) {
  std::vector<std::string> args{DTRAIN_BINARY,         "train", "-n", std::to_string(ranks),
                                "--ranks-per-replica", "2"};
  for (const auto& flag : testing::elastic_cnn_flags(2, base, samples, sync_every))
    args.push_back(flag);
  for (const char* flag : {"--max-restarts", "1", "--restart-delay", "0", "--timeout", "120",
                           "--heartbeat-timeout", "1"})
    args.push_back(flag);
  if (!plan.empty()) args.insert(args.end(), {"--fault-plan", plan});
  return args;
}

ElasticRun finish(testing::Process& p, const std::string& base) {
  const int code = p.wait_for(300s);
  return testing::take_elastic_logs(base, code, p.err());
}

ElasticRun run_plan(const std::string& plan, int64_t samples = 3840, int ranks = 6) {
  const std::string base = base_path();
  testing::Process p(command(base, samples, plan, ranks));
  return finish(p, base);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The launcher's child whose environment has `variable` (its parent is `launcher`).
pid_t child_with(pid_t launcher, const std::string& variable) {
  DIR* dir = opendir("/proc");
  if (dir == nullptr) return -1;
  pid_t found = -1;
  while (const dirent* e = readdir(dir)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid <= 0) continue;
    const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
    const size_t paren = stat.rfind(')');
    if (paren == std::string::npos) continue;
    std::istringstream fields(stat.substr(paren + 2));
    std::string state;
    pid_t parent = -1;
    fields >> state >> parent;
    if (parent != launcher) continue;
    std::string env = read_file("/proc/" + std::to_string(pid) + "/environ");
    std::replace(env.begin(), env.end(), '\0', '\n');
    if (("\n" + env).find("\n" + variable + "\n") != std::string::npos) found = pid;
  }
  closedir(dir);
  return found;
}

void expect_a_replica_lost_and_back(const ElasticRun& r, const std::vector<int64_t>& survivors) {
  bool lost = false, back = false;
  for (const auto& s : r.steps) {
    const auto members = s["members"].get<std::vector<int64_t>>();
    if (s["lost"].get<std::vector<int64_t>>() == std::vector<int64_t>{1}) {
      lost = true;
      EXPECT_EQ(members, survivors) << s.dump();
    }
    if (lost && members.size() == survivors.size() + 1) back = true;
  }
  EXPECT_TRUE(lost && back) << r.err;
}

// Streaming DiLoCo under --elastic with replicas of two ranks: H = 10 in 2 fragments, each
// exchange beside its round's last 2 steps. Replica 1's leader dies as round 2's exchange
// starts (in flight, on its thread): its follower fails on the replica's group, replica 0
// redoes round 2 alone at the round's end, and replica 1, both ranks started again, enters
// at a boundary. Every round exchanges one fragment in turn (both at an epoch's end); every
// sample of each epoch trained once.
TEST(ElasticRanksE2eTest, ALeadersDeathInADelayedFragmentsExchangeIsRedoneAndTheReplicaReturns) {
  const std::string base = base_path();
  std::vector<std::string> args = command(base, 3840, "kill:1@2:exchange,rejoin:1@5", 4, 10);
  args.insert(args.end(), {"--fragments", "2", "--sync-delay", "2"});
  testing::Process p(args);
  const ElasticRun r = finish(p, base);
  ASSERT_EQ(r.code, 0) << r.err;
  expect_a_replica_lost_and_back(r, {0});
  EXPECT_FALSE(r.events("redo").empty()) << r.err;
  // Round 2 exchanged both fragments: its assignment emptied epoch 1's queue, and replica
  // 1's share, back in it when the replica died, made round 3.
  EXPECT_GE(testing::expect_fragments_in_turn(r, /*whole_midway=*/true), 6u) << r.err;
  testing::expect_every_sample_once(r.samples, 2, 3840, r.err);
}

// The leader of replica 1 dies in round 1's inner steps (its follower then fails on the
// replica's group); the survivors redo the exchange, and the replica, both ranks started
// again, enters at round 4. Run twice, the runs end bit-identical; every sample of each
// epoch trained once, by replicas that each trained 2 x 64 samples a step.
TEST(ElasticRanksE2eTest, ALeadersDeathTakesItsReplicaOutItComesBackWholeAndRunsRepeat) {
  const std::string plan = "kill:1@1:inner,rejoin:1@4";
  const ElasticRun a = run_plan(plan), b = run_plan(plan);
  ASSERT_EQ(a.code, 0) << a.err;
  ASSERT_EQ(b.code, 0) << b.err;
  EXPECT_NE(a.err.find("with its replica"), std::string::npos) << a.err;
  expect_a_replica_lost_and_back(a, {0, 2});
  ASSERT_FALSE(a.steps.empty()) << a.err;
  EXPECT_EQ(a.steps.front()["round"], 0) << a.steps.front().dump();
  EXPECT_EQ(a.steps.front()["samples"], 3 * 5 * 64 * 2) << a.steps.front().dump();
  testing::expect_epochs_identical(a, b, 2);
  ASSERT_FALSE(a.epochs().empty());
  EXPECT_GT(a.epochs().back()["test_acc"].get<double>(), 0.5) << a.epochs().back().dump();
  testing::expect_every_sample_once(a.samples, 2, 3840, a.err);
}

// A follower (rank 3: replica 1's second rank) SIGKILLed after round 1: its leader fails at
// its next inner step, the replica is declared lost, the launcher stops the rest of it and
// starts both ranks again, and the run ends with every sample trained once.
TEST(ElasticRanksE2eTest, AFollowersDeathTakesItsReplicaOutAndTheReplicaStartsAgainWhole) {
  const std::string base = base_path();
  testing::Process p(command(base, 7680, ""));
  pid_t follower = -1;
  for (int i = 0; i < 600 && follower < 0; ++i) {
    std::ifstream steps(base + ".steps");
    std::string line;
    int rows = 0;
    while (std::getline(steps, line))
      ++rows;
    if (rows >= 2) follower = child_with(p.pid(), "RANK=3");
    if (follower < 0) std::this_thread::sleep_for(50ms);
  }
  ASSERT_GT(follower, 0) << "no round committed, or no rank 3";
  ASSERT_EQ(kill(follower, SIGKILL), 0);
  const ElasticRun r = finish(p, base);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("rank 3 was killed by signal"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("rank 2 was killed by signal Killed with its replica"), std::string::npos)
      << r.err;
  bool lost = false;
  for (const auto& s : r.steps)
    lost = lost || s["lost"].get<std::vector<int64_t>>() == std::vector<int64_t>{1};
  EXPECT_TRUE(lost) << r.err;
  const auto epochs = r.epochs();
  ASSERT_EQ(epochs.size(), 2u) << r.err;
  EXPECT_EQ(epochs.back()["elastic_members"], 3) << epochs.back().dump();
  testing::expect_every_sample_once(r.samples, 2, 7680, r.err);
}

// An epoch of 3,841 samples in rounds of 2 x 640: its last round takes the remainder, 1,281
// (not 1,280 and then 1), so one share is 641 positions, 5 steps of 2 x 64 and a last of
// one position, fewer than a replica's ranks: the follower trains a weightless copy beside
// its leader's one (rank_slice's filler) rather than the position waiting for a larger
// share that never comes.
TEST(ElasticRanksE2eTest, AnEpochsLastPositionFewerThanTheRanksIsTrainedOnce) {
  const ElasticRun r = run_plan("", 3841, 4);
  ASSERT_EQ(r.code, 0) << r.err;
  ASSERT_EQ(r.epochs().size(), 2u) << r.err;
  EXPECT_EQ(r.epochs().back()["committed_samples"], 3841) << r.epochs().back().dump();
  testing::expect_every_sample_once(r.samples, 2, 3841, r.err);
  ASSERT_EQ(r.steps.size(), 6u) << r.err;
  for (const auto& s : r.steps)
    EXPECT_EQ(s["samples"], s["round"] == 2 || s["round"] == 5 ? 1281 : 1280) << s.dump();
}

// --trace under --elastic: each process writes its own timeline, named by its slot, place
// and start; the leaders' hold the round's ends, the followers' their waits for the plan.
TEST(ElasticRanksE2eTest, EveryProcessWritesItsOwnTrace) {
  const std::string base = base_path();
  std::vector<std::string> args = command(base, 1280, "", 4);
  args.insert(args.end(), {"--trace", base + ".json"});
  testing::Process p(args);
  const ElasticRun r = finish(p, base);
  ASSERT_EQ(r.code, 0) << r.err;
  for (int replica = 0; replica < 2; ++replica) {
    for (int rank = 0; rank < 2; ++rank) {
      const std::string path = base + ".replica" + std::to_string(replica) + "-rank" +
                               std::to_string(rank) + "-start0.json";
      const std::string text = read_file(path);
      ASSERT_FALSE(text.empty()) << path << "\n" << r.err;
      std::set<std::string> names;
      const nlohmann::json trace = nlohmann::json::parse(text);
      for (const auto& e : trace.at("traceEvents"))
        names.insert(e.value("name", ""));
      EXPECT_TRUE(names.count("forward")) << path;
      EXPECT_TRUE(names.count(rank == 0 ? "round's end: exchange, records, outer step"
                                        : "waiting for the leader's plan"))
          << path;
      unlink(path.c_str());
    }
  }
}

// Across hosts each replica is a job of its own (torchrun, Slurm, `dtrain launch`) that joins
// the coordinator: two jobs of two ranks here, and the run ends bit-identical to the same run
// under dtrain's own launcher (-n 4 --ranks-per-replica 2).
TEST(ElasticRanksE2eTest, ReplicasJoiningAsJobsOfTheirOwnTrainAsUnderTheLauncher) {
  const ElasticRun expected = run_plan("", 3840, 4);
  ASSERT_EQ(expected.code, 0) << expected.err;

  const std::string joined = base_path();
  const std::string port = std::to_string(32000 + static_cast<int>(getpid() % 1000));
  testing::Process coordinator(
      {DTRAIN_BINARY, "coordinator", "--host", "127.0.0.1", "--port", port, "--expect", "2"});
  std::vector<std::unique_ptr<testing::Process>> jobs;
  for (int job = 0; job < 2; ++job) {
    std::vector<std::string> a{DTRAIN_BINARY,
                               "launch",
                               "-n",
                               "2",
                               "--",
                               DTRAIN_BINARY,
                               "train",
                               "--join",
                               "127.0.0.1:" + port,
                               "--ranks-per-replica",
                               "2"};
    for (const auto& flag : testing::elastic_cnn_flags(2, joined, 3840, 5))
      a.push_back(flag);
    jobs.push_back(std::make_unique<testing::Process>(a));
  }
  for (auto& job : jobs)
    ASSERT_EQ(job->wait_for(300s), 0) << job->err();
  EXPECT_EQ(coordinator.wait_for(60s), 0) << coordinator.err();
  const ElasticRun got = testing::take_elastic_logs(joined, 0, "");
  testing::expect_epochs_identical(expected, got, 2);
  testing::expect_every_sample_once(got.samples, 2, 3840, "");
}

}  // namespace
}  // namespace dtrain
