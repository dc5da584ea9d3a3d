// Elastic DiLoCo whose membership lives in a real three-member etcd cluster: two
// coordinators (one leads, one stands by) and three replicas started on their own with
// --join etcd://..., no launcher. Mid-run the etcd leader and the leading coordinator are
// SIGKILLed: the standby takes over, and the run goes on with every replica, loses no
// member, redoes no round and trains every sample once. Losing a majority of the members
// ends every process with a clear error.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <signal.h>
#include <unistd.h>

#include <fstream>

#include "../support/e2e.h"
#include "../support/elastic.h"
#include "../support/etcd_cluster.h"

namespace dtrain {
namespace {

using namespace std::chrono_literals;

// `timeout`: seconds any store request may take.
std::vector<std::string> coordinator(const std::string& store, const char* timeout = "60") {
  return {DTRAIN_BINARY,
          "coordinator",
          "--store",
          store,
          "--expect",
          "3",
          "--takeover-after",
          "1",
          "--heartbeat-timeout",
          "2",
          "--timeout",
          timeout};
}

std::vector<std::string> replica(const std::string& store, const std::string& base, int epochs = 3,
                                 const char* timeout = "60") {
  std::vector<std::string> args{DTRAIN_BINARY, "train", "--join", store};
  for (const auto& flag : testing::elastic_cnn_flags(epochs, base))
    args.push_back(flag);
  for (const char* flag : {"--heartbeat-timeout", "2", "--timeout", timeout})
    args.push_back(flag);
  return args;
}

// The highest round in the step log so far (-1: none yet).
int64_t last_round(const std::string& steps) {
  std::ifstream in(steps);
  int64_t round = -1;
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("round")) round = std::max(round, j["round"].get<int64_t>());
  }
  return round;
}

TEST(ElasticEtcdE2eTest, TheRunOutlivesTheEtcdLeaderAndTheLeadingCoordinator) {
  testing::EtcdCluster etcd(3);
  ASSERT_TRUE(etcd.ready()) << "etcd did not start (scripts/install-deps.sh installs it)";
  const std::string store = etcd.address("e2e");
  const std::string base = "/tmp/dtrain-e2e-etcd-" + std::to_string(getpid());
  testing::Process first(coordinator(store));
  std::this_thread::sleep_for(1s);  // the first leads
  testing::Process second(coordinator(store));
  std::vector<std::unique_ptr<testing::Process>> replicas;
  for (int i = 0; i < 3; ++i)
    replicas.push_back(std::make_unique<testing::Process>(replica(store, base)));
  // Rounds take about a second: kill both once the run is well under way.
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  while (last_round(base + ".steps") < 3 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(100ms);
  ASSERT_GE(last_round(base + ".steps"), 3) << replicas[0]->err();
  const int leader = etcd.leader();
  ASSERT_GE(leader, 0);
  etcd.kill_member(leader);
  kill(first.pid(), SIGKILL);
  for (auto& r : replicas)
    EXPECT_EQ(r->wait_for(300s), 0) << r->err();
  EXPECT_EQ(second.wait_for(30s), 0) << second.err();
  EXPECT_NE(second.err().find("coordinator: leading the run (as of view 1)"), std::string::npos)
      << second.err();

  const auto steps = testing::take_json_lines_file(base + ".steps");
  const auto metrics = testing::take_json_lines_file(base + ".metrics");
  const auto samples = testing::take_json_lines_file(base + ".samples");
  std::set<int64_t> rounds;
  for (const auto& s : steps) {
    EXPECT_TRUE(rounds.insert(s["round"].get<int64_t>()).second) << "redone: " << s.dump();
    EXPECT_EQ(s["members"].size(), 3u) << s.dump();
    EXPECT_TRUE(s["lost"].empty()) << s.dump();
    EXPECT_EQ(s["view"], 1) << s.dump();
  }
  int epochs = 0;
  for (const auto& m : metrics) {
    if (!m.contains("epoch") || m.contains("event")) continue;
    ++epochs;
    EXPECT_EQ(m["committed_samples"], 3840) << m.dump();
    EXPECT_EQ(m["lost_samples"], 0) << m.dump();
  }
  EXPECT_EQ(epochs, 3);
  testing::expect_every_sample_once(samples, 3, 3840, replicas[0]->err());
}

// Losing a majority of etcd's members loses the store: every replica and the coordinator end
// non-zero, each naming the store, within twice the store's timeout (no hang).
TEST(ElasticEtcdE2eTest, LosingAMajorityOfEtcdEndsEveryProcessWithAClearError) {
  testing::EtcdCluster etcd(3);
  ASSERT_TRUE(etcd.ready()) << "etcd did not start (scripts/install-deps.sh installs it)";
  const std::string store = etcd.address("majority");
  const std::string base = "/tmp/dtrain-e2e-etcd-majority-" + std::to_string(getpid());
  testing::Process lead(coordinator(store, "10"));
  std::vector<std::unique_ptr<testing::Process>> replicas;
  for (int i = 0; i < 3; ++i)
    replicas.push_back(std::make_unique<testing::Process>(replica(store, base, 30, "10")));
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  while (last_round(base + ".steps") < 2 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(100ms);
  ASSERT_GE(last_round(base + ".steps"), 2) << replicas[0]->err();
  etcd.kill_member(0);
  etcd.kill_member(1);
  const auto killed = std::chrono::steady_clock::now();
  for (auto& r : replicas) {
    const int code = r->wait_for(60s);
    EXPECT_NE(code, -1) << "a replica hangs: " << r->err();
    EXPECT_NE(code, 0) << r->err();
    EXPECT_NE(r->err().find("dtrain: error: store etcd://"), std::string::npos) << r->err();
  }
  EXPECT_NE(lead.wait_for(30s), 0) << lead.err();
  EXPECT_NE(lead.err().find("got no answer within 10000 ms"), std::string::npos) << lead.err();
  EXPECT_LT(std::chrono::steady_clock::now() - killed, 45s);
  for (const char* suffix : {".steps", ".metrics", ".samples"})
    std::remove((base + suffix).c_str());
}

}  // namespace
}  // namespace dtrain
