// The network lab for real: namespaces, tc-shaped links, ranks placed on its hosts. Needs
// root and network namespaces (CI has both); skipped with the reason otherwise.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "../support/e2e.h"
#include "../support/elastic.h"
#include "../support/process.h"

namespace dtrain {
namespace {

using testing::json_lines;
using testing::Process;
using namespace std::chrono_literals;

// Why labs cannot be made here, or empty when they can.
std::string lab_unsupported_reason() {
  if (geteuid() != 0) return "not root: a network lab needs root";
  const std::string probe = "dtrain-probe-" + std::to_string(getpid());
  Process add({"ip", "netns", "add", probe});
  if (add.wait_for(30s) != 0) return "`ip netns add` fails here: " + add.err();
  Process del({"ip", "netns", "del", probe});
  del.wait_for(30s);
  return "";
}

#define SKIP_WITHOUT_LABS()                                         \
  do {                                                              \
    const std::string why = lab_unsupported_reason();               \
    if (!why.empty()) GTEST_SKIP() << "network lab tests: " << why; \
  } while (0)

bool namespace_exists(const std::string& ns) {
  struct stat st {};
  return stat(("/run/netns/" + ns).c_str(), &st) == 0;
}

// A lab named uniquely for this test process, removed however the test ends.
class Lab {
 public:
  explicit Lab(const std::vector<std::string>& flags) : name_("t" + std::to_string(getpid())) {
    std::vector<std::string> argv{DTRAIN_BINARY, "netlab", "up", name_};
    argv.insert(argv.end(), flags.begin(), flags.end());
    Process up(argv);
    EXPECT_EQ(up.wait_for(60s), 0) << up.err();
    ok_ = !::testing::Test::HasFailure();
  }
  ~Lab() {
    if (!ok_) return;
    Process down({DTRAIN_BINARY, "netlab", "down", name_});
    EXPECT_EQ(down.wait_for(60s), 0) << down.err();
    for (const char* ns : {"-sw", "-h0", "-h1"})
      EXPECT_FALSE(namespace_exists("dtrain-" + name_ + ns)) << "left behind: " << ns;
  }
  const std::string& name() const { return name_; }
  bool ok() const { return ok_; }
  void run(const std::vector<std::string>& netlab_args) const {
    std::vector<std::string> argv{DTRAIN_BINARY, "netlab"};
    argv.insert(argv.end(), netlab_args.begin(), netlab_args.end());
    Process p(argv);
    ASSERT_EQ(p.wait_for(60s), 0) << p.err();
  }

 private:
  std::string name_;
  bool ok_ = false;
};

// `dtrain train -n 2 --epochs 1` with `flags`, on `lab` (loopback where null): the epoch's
// metrics row.
nlohmann::json one_epoch(const Lab* lab, const std::vector<std::string>& flags) {
  const std::string metrics = "/tmp/dtrain-netlab-train-" + std::to_string(getpid()) + ".jsonl";
  std::vector<std::string> argv{DTRAIN_BINARY,   "train",     "-n",        "2",
                                "--epochs",      "1",         "--metrics", metrics,
                                "--no-progress", "--timeout", "60"};
  if (lab) argv.insert(argv.end(), {"--netlab", lab->name()});
  argv.insert(argv.end(), flags.begin(), flags.end());
  Process p(argv);
  EXPECT_EQ(p.wait_for(240s), 0) << p.err();
  const auto rows = testing::take_json_lines_file(metrics);
  EXPECT_EQ(rows.size(), 2u);  // the epoch and the summary
  return rows.empty() ? nlohmann::json() : rows[0];
}

// bench p2p between the lab's two hosts: bytes/s of the bandwidth test.
double measured_bytes_per_s(const Lab& lab, const std::string& size) {
  Process p({DTRAIN_BINARY, "bench", "p2p", "-n", "2", "--netlab", lab.name(), "--sizes", size,
             "--iters", "3", "--window", "4", "--warmup", "1", "--format", "jsonl", "--timeout",
             "60"});
  EXPECT_EQ(p.wait_for(120s), 0) << p.err();
  const auto rows = json_lines(p.out());
  EXPECT_EQ(rows.size(), 1u) << p.out();
  return rows.empty() ? 0 : rows[0]["bandwidth_gbps"].get<double>() * 1e9;
}

// A shaped link never carries more than its rate, and a busy machine only ever makes a run
// read less (TCP/IP headers alone take 3-4 % of a 1500-byte frame): the link's rate is the
// best of up to three runs, and the upper bound is what proves the shaping. `set` reshapes
// the link to 400 Mbit/s, which the 2-core VM carries at 0.95 run after run; at 1 Gbit/s its
// cores were the limit (idle 0.91-0.96 of the rate, under a full ctest three runs in a row
// 0.85 or less): that measured the machine, not the lab.
double best_bytes_per_s(const Lab& lab, const std::string& size, double rate_bytes_per_s) {
  double best = 0;
  for (int run = 0; run < 3 && best < 0.9 * rate_bytes_per_s; ++run)
    best = std::max(best, measured_bytes_per_s(lab, size));
  return best;
}

TEST(NetlabTest, MeasuredBandwidthIsTheSetRate) {
  SKIP_WITHOUT_LABS();
  Lab lab({"--hosts", "2", "--rate", "100mbit"});
  ASSERT_TRUE(lab.ok());
  for (const auto& [rate, size] : {std::pair{100e6 / 8, "1M"}, std::pair{400e6 / 8, "4M"}}) {
    SCOPED_TRACE(std::to_string(rate * 8 / 1e6) + " Mbit/s");
    if (rate > 100e6 / 8) lab.run({"set", lab.name(), "--rate", "400mbit"});
    const double best = best_bytes_per_s(lab, size, rate);
    EXPECT_LT(best, 1.05 * rate);
    EXPECT_GT(best, 0.85 * rate);
  }
}

// Both directions of a link carry an all-reduce at once, as Gloo's own all-reduce does: each
// hand-written algorithm's bus bandwidth (the rate each direction carries) is at least 0.85x
// Gloo's, measured in the same run (the lab's rate alone scatters from run to run). While a
// rank posted its receive behind its own send, the two directions took turns: 0.57-0.74x at
// 4 MiB on this link (docs/results.md); 2 MiB (0.8 s a direction) keeps the test short.
// 1 MiB without the delay read too close to call. Two iterations on a loaded machine read
// 0.84x once where the algorithm was sound, so an algorithm gets up to three runs and its
// best ratio counts: taking turns stays below 0.75x in every run.
TEST(NetlabTest, AllReduceCarriesBothDirectionsAtOnce) {
  SKIP_WITHOUT_LABS();
  Lab lab({"--hosts", "2", "--rate", "20mbit", "--delay", "5ms"});
  ASSERT_TRUE(lab.ok());
  std::map<std::string, double> best_ratio{{"ring", 0}, {"direct", 0}, {"butterfly", 0}};
  std::map<std::string, std::string> last_row;
  for (int run = 0; run < 3; ++run) {
    std::string algos = "native";
    for (const auto& [algo, ratio] : best_ratio)
      if (ratio <= 0.85) algos += "," + algo;
    if (algos == "native") break;
    Process p({DTRAIN_BINARY, "bench", "collective", "-n", "2", "--netlab", lab.name(), "--sizes",
               "2M", "--algo", algos, "--warmup", "1", "--iters", "2", "--format", "jsonl",
               "--timeout", "60"});
    ASSERT_EQ(p.wait_for(180s), 0) << p.err();
    const auto rows = json_lines(p.out());
    ASSERT_GE(rows.size(), 2u) << p.out();
    ASSERT_EQ(rows[0]["algo"], "native") << p.out();
    const double gloo = rows[0]["busbw_gbps"].get<double>();
    for (size_t i = 1; i < rows.size(); ++i) {
      const std::string algo = rows[i]["algo"];
      double& ratio = best_ratio.at(algo);
      ratio = std::max(ratio, rows[i]["busbw_gbps"].get<double>() / gloo);
      last_row[algo] = rows[i].dump();
    }
  }
  for (const auto& [algo, ratio] : best_ratio)
    EXPECT_GT(ratio, 0.85) << algo << ": " << last_row[algo];
}

// Openings over a real long link (a round trip of 6 ms): connect gives the link openings
// (the job's setting reads on), and the ring's all-reduce, reduce-scatter and all-gather and
// the exchange all-reduce, with and without them, give exact results between two
// processes, sizes inside one opening (4 KiB) and beyond it (5 MiB over 4 connections).
TEST(NetlabTest, OpeningsCarryExactCollectivesOverALongLink) {
  SKIP_WITHOUT_LABS();
  Lab lab({"--hosts", "2", "--rate", "1gbit", "--delay", "3ms"});
  ASSERT_TRUE(lab.ok());
  const auto bench = [&](const std::string& op, const std::string& algos,
                         const std::string& openings) {
    Process p({DTRAIN_BINARY, "bench",    "collective", "-n",         "2",
               "--netlab",    lab.name(), "--op",       op,           "--sizes",
               "4K,5M",       "--algo",   algos,        "--openings", openings,
               "--streams",   "4",        "--warmup",   "1",          "--iters",
               "2",           "--format", "jsonl",      "--timeout",  "60"});
    EXPECT_EQ(p.wait_for(180s), 0) << p.err();
    return json_lines(p.out());
  };
  for (const auto& row : bench("all_reduce", "ring", "job")) {
    EXPECT_EQ(row["openings"], "on") << row.dump();
    EXPECT_EQ(row["wrong"], 0) << row.dump();
  }
  size_t rows = 0;
  for (const std::string op : {"all_reduce", "reduce_scatter", "all_gather"}) {
    for (const auto& row : bench(op, op == "all_reduce" ? "ring,exchange" : "ring", "both")) {
      EXPECT_EQ(row["wrong"], 0) << row.dump();
      ++rows;
    }
  }
  EXPECT_EQ(rows, 2u * 2u * (2u + 1u + 1u));  // sizes x on/off x algorithms
}

// DDP on a long link (a round trip of 6 ms: over the 5 ms rule) arms its exact buckets'
// receives and sends BatchNorm's buffers early (parallel/ddp.h): a model with BatchNorm
// trains to the same losses and accuracy as on loopback, bit for bit (a sum of two ranks'
// gradients is the same whichever algorithm adds them), and the rows say so.
TEST(NetlabTest, DdpOnALongLinkArmsItsBucketsAndTrainsAsOnLoopback) {
  SKIP_WITHOUT_LABS();
  Lab lab({"--hosts", "2", "--rate", "1gbit", "--delay", "3ms"});
  ASSERT_TRUE(lab.ok());
  const std::vector<std::string> flags{"--parallel",       "ddp",     "--model",       "resnet18",
                                       "--width",          "0.125",   "--dataset",     "synthetic",
                                       "--input-shape",    "3,16,16", "--num-classes", "4",
                                       "--synthetic-size", "128",     "--limit-test",  "32",
                                       "--batch-size",     "16",      "--seed",        "7"};
  const auto loopback = one_epoch(nullptr, flags);
  const auto long_link = one_epoch(&lab, flags);
  EXPECT_EQ(loopback.value("armed_buckets", -1), 0) << loopback.dump();
  EXPECT_GE(long_link.value("armed_buckets", -1), 1) << long_link.dump();
  EXPECT_EQ(long_link.value("armed_buckets", -1), long_link.value("buckets", -2));
  for (const char* key : {"train_loss", "test_loss", "test_acc"})
    EXPECT_EQ(long_link.at(key), loopback.at(key)) << key;
}

// Streaming DiLoCo with coded outer gradients on a long link (a round trip of 6 ms): its
// exchanges go through openings there (comm/tags.h) and not on loopback, and the run trains
// to the same losses and accuracy, bit for bit.
TEST(NetlabTest, StreamingDilocoOnALongLinkTrainsAsOnLoopback) {
  SKIP_WITHOUT_LABS();
  Lab lab({"--hosts", "2", "--rate", "1gbit", "--delay", "3ms"});
  ASSERT_TRUE(lab.ok());
  const std::vector<std::string> flags{
      "--parallel",   "diloco", "--model",          "mlp",        "--limit-train", "1024",
      "--limit-test", "128",    "--sync-every",     "8",          "--fragments",   "2",
      "--sync-delay", "2",      "--compress-outer", "rot:tile:2", "--seed",        "3"};
  const auto loopback = one_epoch(nullptr, flags);
  const auto long_link = one_epoch(&lab, flags);
  EXPECT_GE(long_link.value("outer_steps", 0), 2) << long_link.dump();
  for (const char* key : {"train_loss", "test_loss", "test_acc", "outer_wire_bytes"})
    EXPECT_EQ(long_link.at(key), loopback.at(key)) << key;
}

TEST(NetlabTest, LaunchPlacesRankKOnHostK) {
  SKIP_WITHOUT_LABS();
  Lab lab({"--hosts", "2"});
  ASSERT_TRUE(lab.ok());
  Process p({DTRAIN_BINARY, "launch", "-n", "2", "--netlab", lab.name(), "--", "sh", "-c",
             "echo at $DTRAIN_GLOO_HOST master $MASTER_ADDR; ip -o -4 addr show"});
  ASSERT_EQ(p.wait_for(30s), 0) << p.err();
  for (int k = 0; k < 2; ++k) {
    const std::string addr = "10.200.0." + std::to_string(k + 1);
    const std::string rank = "[rank " + std::to_string(k) + "] ";
    EXPECT_NE(p.out().find(rank + "at " + addr + " master 10.200.0.1"), std::string::npos)
        << p.out();
    EXPECT_NE(p.out().find(rank + "2: eth0    inet " + addr + "/24"), std::string::npos) << p.out();
  }
  Process three({DTRAIN_BINARY, "launch", "-n", "3", "--netlab", lab.name(), "--", "true"});
  EXPECT_NE(three.wait_for(30s), 0);
  EXPECT_NE(three.err().find("has 2 hosts, fewer than the 3 ranks"), std::string::npos)
      << three.err();
}

// Every host reads the lab's kernel settings; `set` changes one in place; a key the
// namespace has not is refused and leaves no lab behind. Rank 0 advises on the idle restart
// where the hosts' setting has it.
TEST(NetlabTest, HostsCarryTheLabsKernelSettings) {
  SKIP_WITHOUT_LABS();
  Lab lab({"--hosts", "2", "--sysctl", "net.ipv4.tcp_slow_start_after_idle=0"});
  ASSERT_TRUE(lab.ok());
  // Each host's value, by rank (the ranks' lines come in either order).
  const auto read = [&lab] {
    Process p({DTRAIN_BINARY, "launch", "-n", "2", "--netlab", lab.name(), "--", "cat",
               "/proc/sys/net/ipv4/tcp_slow_start_after_idle"});
    EXPECT_EQ(p.wait_for(30s), 0) << p.err();
    std::vector<std::string> lines;
    std::istringstream out(p.out());
    for (std::string line; std::getline(out, line);)
      lines.push_back(line);
    std::sort(lines.begin(), lines.end());
    return lines;
  };
  using Lines = std::vector<std::string>;
  EXPECT_EQ(read(), (Lines{"[rank 0] 0", "[rank 1] 0"}));
  lab.run({"set", lab.name(), "--sysctl", "net.ipv4.tcp_slow_start_after_idle=1"});
  EXPECT_EQ(read(), (Lines{"[rank 0] 1", "[rank 1] 1"}));
  Process list({DTRAIN_BINARY, "netlab", "list"});
  ASSERT_EQ(list.wait_for(30s), 0);
  EXPECT_NE(list.out().find("net.ipv4.tcp_slow_start_after_idle=1"), std::string::npos)
      << list.out();
  // With the restart on and reno on a long link's connections, rank 0 says so, once.
  lab.run({"set", lab.name(), "--delay", "5ms"});
  Process reno({DTRAIN_BINARY, "bench", "p2p", "-n", "2", "--netlab", lab.name(), "--sizes", "4K",
                "--iters", "2", "--format", "jsonl", "--tcp-congestion", "reno"});
  ASSERT_EQ(reno.wait_for(60s), 0) << reno.err();
  const std::string advice = "this host restarts an idle connection's window";
  const size_t first = reno.err().find("[rank 0] dtrain: the connections run reno");
  EXPECT_NE(first, std::string::npos) << reno.err();
  EXPECT_EQ(reno.err().find(advice, reno.err().find(advice) + 1), std::string::npos);
  lab.run({"set", lab.name(), "--sysctl", "net.ipv4.tcp_slow_start_after_idle=0"});
  Process quiet({DTRAIN_BINARY, "bench", "p2p", "-n", "2", "--netlab", lab.name(), "--sizes", "4K",
                 "--iters", "2", "--format", "jsonl", "--tcp-congestion", "reno"});
  ASSERT_EQ(quiet.wait_for(60s), 0) << quiet.err();
  EXPECT_EQ(quiet.err().find(advice), std::string::npos) << quiet.err();
  const std::string name = "s" + std::to_string(getpid());
  Process bad({DTRAIN_BINARY, "netlab", "up", name, "--sysctl", "net.ipv4.nosuch=1"});
  EXPECT_NE(bad.wait_for(60s), 0);
  EXPECT_NE(bad.err().find("sysctl -qw net.ipv4.nosuch=1` failed"), std::string::npos) << bad.err();
  EXPECT_FALSE(namespace_exists("dtrain-" + name + "-h0"));
}

TEST(NetlabTest, AFailedUpLeavesNothingBehind) {
  SKIP_WITHOUT_LABS();
  const std::string name = "f" + std::to_string(getpid());
  // The state cannot be written: every command has run by then, all must be undone.
  Process up({DTRAIN_BINARY, "netlab", "up", name, "--hosts", "2", "--rate", "10mbit"},
             {{"DTRAIN_NETLAB_DIR", "/dev/null/labs"}});
  EXPECT_NE(up.wait_for(60s), 0);
  EXPECT_NE(up.err().find("cannot create /dev/null"), std::string::npos) << up.err();
  for (const char* ns : {"-sw", "-h0", "-h1"})
    EXPECT_FALSE(namespace_exists("dtrain-" + name + ns)) << ns;
  Process down({DTRAIN_BINARY, "netlab", "down", name});
  EXPECT_NE(down.wait_for(30s), 0);
  EXPECT_NE(down.err().find("no lab named '" + name + "' is up"), std::string::npos) << down.err();
}

TEST(NetlabTest, ACutLinkEndsEveryRankNamingThePeer) {
  SKIP_WITHOUT_LABS();
  Lab lab({"--hosts", "2", "--rate", "1gbit"});
  ASSERT_TRUE(lab.ok());
  Process train({DTRAIN_BINARY, "train", "-n", "2", "--netlab", lab.name(), "--parallel",
                 "pipeline", "--model", "mlp", "--dataset", "synthetic", "--epochs", "1000",
                 "--timeout", "8"});
  std::this_thread::sleep_for(4s);
  ASSERT_EQ(train.wait_for(0s), -1) << "ended before the cut: " << train.err();
  lab.run({"link", lab.name(), "1", "down"});
  const auto t0 = std::chrono::steady_clock::now();
  const int code = train.wait_for(60s);
  EXPECT_NE(code, -1) << "hangs";
  EXPECT_NE(code, 0);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 30s);
  const std::string err = train.err();
  EXPECT_NE(err.find("[rank 0] dtrain: error:"), std::string::npos) << err;
  EXPECT_NE(err.find("rank 1"), std::string::npos) << err;
}

// The lab's rate changes under a running job: auto's next epoch sees it and chooses again.
TEST(NetlabTest, CompressAutoFollowsARateChangeAtTheNextEpoch) {
  SKIP_WITHOUT_LABS();
  Lab lab({"--hosts", "2", "--rate", "10mbit"});
  ASSERT_TRUE(lab.ok());
  const std::string metrics = "/tmp/dtrain-netlab-auto-" + std::to_string(getpid()) + ".jsonl";
  Process train({DTRAIN_BINARY,
                 "train",
                 "-n",
                 "2",
                 "--netlab",
                 lab.name(),
                 "--parallel",
                 "pipeline",
                 "--placement",
                 "ushape",
                 "--model",
                 "cnn",
                 "--limit-train",
                 "640",
                 "--limit-test",
                 "100",
                 "--epochs",
                 "2",
                 "--compress",
                 "auto",
                 "--metrics",
                 metrics,
                 "--no-progress",
                 "--timeout",
                 "120"});
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  while (train.err().find("auto: link 1->0") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline && train.wait_for(0s) == -1) {
    std::this_thread::sleep_for(100ms);
  }
  lab.run({"set", lab.name(), "--rate", "5gbit"});
  ASSERT_EQ(train.wait_for(180s), 0) << train.err();
  const auto rows = testing::take_json_lines_file(metrics);
  ASSERT_EQ(rows.size(), 3u);
  for (const auto& l : rows[0]["auto_links"]) {
    EXPECT_NEAR(l["rate_mbps"].get<double>(), 10, 1) << l.dump();
    EXPECT_EQ(l["codec"], "sortquant:6:2") << l.dump();
  }
  for (const auto& l : rows[1]["auto_links"]) {
    EXPECT_GT(l["rate_mbps"].get<double>(), 1000) << l.dump();
    EXPECT_NE(l["codec"], "sortquant:6:2") << l.dump();
  }
}

// One epoch of DDP on the mlp with --compress-grad auto between the lab's hosts: its JSON
// lines (the epoch's row, the summary); whatever it wrote if the run failed (reported).
std::vector<nlohmann::json> ddp_auto_rows(const Lab& lab, const std::string& limit_train,
                                          const std::string& limit_test) {
  const std::string metrics = "/tmp/dtrain-netlab-ddp-" + std::to_string(getpid()) + ".jsonl";
  Process train({DTRAIN_BINARY,  "train",    "-n",           "2",   "--netlab",        lab.name(),
                 "--parallel",   "ddp",      "--model",      "mlp", "--limit-train",   limit_train,
                 "--limit-test", limit_test, "--epochs",     "1",   "--compress-grad", "auto",
                 "--metrics",    metrics,    "--no-progress"});
  EXPECT_EQ(train.wait_for(300s), 0) << train.err();
  return testing::take_json_lines_file(metrics);
}

// DDP on a 10 Mbit/s link: the gradients are worth compressing, and training still learns.
TEST(NetlabTest, CompressGradAutoCompressesOnASlowLink) {
  SKIP_WITHOUT_LABS();
  Lab lab({"--hosts", "2", "--rate", "10mbit"});
  ASSERT_TRUE(lab.ok());
  const auto rows = ddp_auto_rows(lab, "1024", "256");
  ASSERT_EQ(rows.size(), 2u);
  const auto& link = rows[0]["auto_links"].at(0);
  // The gradients' own exchange kept the link busy long enough to measure it: no probe.
  // Its rate is the exchange's effective one (the gaps between the ranks' messages count),
  // a little under the probe's 9.6-10 on this link (7.7 once, beside the whole suite on 2
  // cores: the gaps grow with the load).
  EXPECT_EQ(link["rate_from"], "step") << link.dump();
  EXPECT_GT(link["rate_mbps"].get<double>(), 7) << link.dump();
  EXPECT_LT(link["rate_mbps"].get<double>(), 10.5) << link.dump();
  EXPECT_EQ(link["codec"], "sortquant:6:2") << link.dump();
  EXPECT_GT(rows[0]["test_acc"].get<double>(), 0.3);  // chance: 0.1
}

// DiLoCo on a 20 Mbit/s link with --compress-outer auto: no candidate keeps the exchange
// under 5 % of the steps there, and rot:tile:2 (2 bits: the outer auto's default floor)
// waits least; with --compress-min-bits 8, sortquant:8 (canonical sortquant:6:2). The first
// epoch (10 steps) ends before the link probe does: its exchanges go with the lossiest
// candidate, the same codec; auto chooses in the second (a vote is counted two exchanges
// after it: H = 2, five exchanges an epoch).
TEST(NetlabTest, CompressOuterAutoCodesTheOuterExchangeOnASlowLink) {
  SKIP_WITHOUT_LABS();
  Lab lab({"--hosts", "2", "--rate", "20mbit"});
  ASSERT_TRUE(lab.ok());
  const std::string metrics = "/tmp/dtrain-netlab-diloco-" + std::to_string(getpid()) + ".jsonl";
  for (const std::string floor : {"", "8"}) {
    std::vector<std::string> argv{
        DTRAIN_BINARY,      "train",  "-n",        "2",     "--netlab",      lab.name(),
        "--parallel",       "diloco", "--model",   "mlp",   "--limit-train", "1280",
        "--limit-test",     "256",    "--epochs",  "2",     "--sync-every",  "2",
        "--compress-outer", "auto",   "--metrics", metrics, "--no-progress"};
    if (!floor.empty()) argv.insert(argv.end(), {"--compress-min-bits", floor});
    Process train(argv);
    ASSERT_EQ(train.wait_for(300s), 0) << train.err();
    const auto rows = testing::take_json_lines_file(metrics);
    ASSERT_EQ(rows.size(), 3u);
    for (const auto& row : {rows[0], rows[1]}) {
      EXPECT_EQ(row["outer_codec"], floor.empty() ? "rot:256:tile:2" : "sortquant:6:2")
          << train.err();
      EXPECT_LT(row["outer_wire_bytes"].get<double>(), row["outer_fp32_bytes"].get<double>() / 3);
    }
    EXPECT_NE(train.err().find("--compress-outer auto chose "), std::string::npos) << train.err();
    EXPECT_NE(train.err().find("Mbit/s"), std::string::npos) << train.err();
  }
}

// Elastic DiLoCo under auto on a slow link: the founders code the outer exchange, and a
// replica that replaces a killed one codes it alike (a codec of its own would fail or
// garble the exchange; its digest would differ and be re-synced). The choices again from the
// exchanges keep it coded on this link (each epoch's codec is the one in force at its end).
TEST(NetlabTest, ElasticCompressOuterAutoCodesOnASlowLinkAndAJoinerCodesAlike) {
  SKIP_WITHOUT_LABS();
  Lab lab({"--hosts", "3", "--rate", "20mbit", "--delay", "2ms"});
  ASSERT_TRUE(lab.ok());
  const std::string base = "/tmp/dtrain-netlab-elastic-" + std::to_string(getpid());
  std::vector<std::string> argv{DTRAIN_BINARY, "train", "-n", "3", "--netlab", lab.name()};
  for (const auto& flag : testing::elastic_cnn_flags(2, base))
    argv.push_back(flag);
  for (const char* flag :
       {"--compress-outer", "auto", "--fault-plan", "kill:1@1:inner,rejoin:1@3", "--max-restarts",
        "1", "--restart-delay", "0", "--heartbeat-timeout", "2", "--timeout", "120"})
    argv.push_back(flag);
  Process train(argv);
  ASSERT_EQ(train.wait_for(400s), 0) << train.err();
  std::vector<nlohmann::json> epochs, resyncs;
  bool joined = false;
  for (const auto& row : testing::take_json_lines_file(base + ".metrics")) {
    if (row.value("event", "") == "resync") resyncs.push_back(row);
    if (row.value("event", "") == "joined") joined = true;
    if (row.contains("epoch") && !row.contains("event")) epochs.push_back(row);
  }
  ASSERT_EQ(epochs.size(), 2u) << train.err();
  for (const auto& e : epochs) {
    EXPECT_NE(e["outer_codec"], "none") << train.err();
    EXPECT_NE(e["outer_codec"], "auto");
    EXPECT_EQ(e["committed_samples"], 3840) << e.dump();
  }
  EXPECT_TRUE(joined) << train.err();
  EXPECT_TRUE(resyncs.empty()) << train.err();
  EXPECT_NE(train.err().find("elastic: --compress-outer auto chose"), std::string::npos)
      << train.err();
  testing::expect_every_sample_once(testing::take_json_lines_file(base + ".samples"), 2, 3840,
                                    train.err());
}

// The probe on a fast link: a 1 Gbit/s link's token bucket lets 250 KB through at once,
// more than the probe's first sizes; it must never read more than 10 % over the link (it read
// 1.2-1.3 Gbit/s before it scaled its sizes up on fast links). DDP's probe sends both ways at
// once, as its all-reduce does: each direction's acknowledgements then queue behind the
// other's data, and the two directions often share the link unevenly; with its rounds
// repeated until they read even, it reads 878-1006 Mbit/s on this 2-core VM. Reading
// 1 Gbit/s through the lab's veth pairs and token bucket takes CPU, and a slower CI machine
// read 730 (the test running alone), so the lower bound only catches a gross underread
// (under 0.6 of the link) and a reading under it is taken again once; an overread fails
// either way.
TEST(NetlabTest, TheProbeReadsAFastLinkWithoutOverreading) {
  SKIP_WITHOUT_LABS();
  Lab lab({"--hosts", "2", "--rate", "1gbit"});
  ASSERT_TRUE(lab.ok());
  const auto reading = [&]() {
    const auto rows = ddp_auto_rows(lab, "512", "100");
    EXPECT_EQ(rows.size(), 2u);
    if (rows.empty()) return nlohmann::json();
    const auto link = rows[0]["auto_links"].at(0);
    EXPECT_EQ(link["rate_from"], "probe") << link.dump();
    EXPECT_LT(link["rate_mbps"].get<double>(), 1100) << link.dump();
    return link;
  };
  auto link = reading();
  ASSERT_FALSE(link.is_null());
  if (link["rate_mbps"].get<double>() <= 600) {
    std::cerr << "probe read under 0.6 of the link once, measuring again: " << link.dump() << "\n";
    link = reading();
    ASSERT_FALSE(link.is_null());
  }
  EXPECT_GT(link["rate_mbps"].get<double>(), 600) << link.dump();
}

// What DiLoCo's --compress-outer auto read of the lab's link: {Mbit/s, ms one way}, and the
// line that says so (-1, -1 and the run's stderr when it did not say).
struct ProbeReading {
  double mbit = -1, one_way_ms = -1;
  std::string line;
};
// Two epochs of 5 steps, an exchange after each: on a 100 ms link the probe outlasts the
// first epoch, and auto chooses in the second (each vote is counted two exchanges later).
ProbeReading auto_reading(const Lab& lab) {
  Process train({DTRAIN_BINARY,      "train",  "-n",           "2",   "--netlab",      lab.name(),
                 "--parallel",       "diloco", "--model",      "mlp", "--limit-train", "640",
                 "--limit-test",     "64",     "--epochs",     "2",   "--sync-every",  "1",
                 "--compress-outer", "auto",   "--no-progress"});
  EXPECT_EQ(train.wait_for(300s), 0) << train.err();
  const std::string err = train.err();
  const size_t at = err.find("auto chose");
  ProbeReading r;
  r.line = at == std::string::npos ? err : err.substr(at, 200);
  const size_t open = at == std::string::npos ? at : err.find('(', at);
  if (open == std::string::npos ||
      std::sscanf(err.c_str() + open, "(%lf Mbit/s, %lf ms one way", &r.mbit, &r.one_way_ms) != 2)
    r.mbit = r.one_way_ms = -1;  // the line stays, to say what the run printed
  return r;
}

// The link probe (comm/link_probe.h) on a 50 Mbit/s lab at 0, 5, 25 and 100 ms one way, as
// DiLoCo's --compress-outer auto reads it: the rate within 20 % of the lab's and the one-way
// delay within 20 % of the set one. Before its pings were posted ahead and its rate came
// from trains, it read 50 Mbit/s + 25 ms as 31,457,280 Mbit/s and 50.5 ms one way. A busy
// machine can spoil one reading (one CI run read 100 ms as 7.3 Mbit/s: a train held back;
// on the 2-core VM's userspace impairer 100 ms reads 50-61 Mbit/s; beside another test's
// training a 0 ms link read 2-4 ms one way, whole scheduler ticks of 4 ms a round trip), so a
// reading out of bounds is taken again, twice at most, and the last must be right: a probe
// wrong by its method (a round trip read as one way, a rate read from latency) is wrong in
// every reading.
TEST(NetlabTest, TheProbeReadsTheRateAndTheDelayOfShortAndLongLinks) {
  SKIP_WITHOUT_LABS();
  Lab lab({"--hosts", "2", "--rate", "50mbit"});
  ASSERT_TRUE(lab.ok());
  for (const int delay_ms : {0, 5, 25, 100}) {
    SCOPED_TRACE(std::to_string(delay_ms) + " ms");
    lab.run({"set", lab.name(), "--delay", std::to_string(delay_ms) + "ms"});
    const auto right = [&](const ProbeReading& r) {
      const bool delay_right = delay_ms == 0 ? r.one_way_ms >= 0 && r.one_way_ms < 2
                                             : std::abs(r.one_way_ms - delay_ms) <= 0.2 * delay_ms;
      return std::abs(r.mbit - 50) <= 10 && delay_right;
    };
    ProbeReading r = auto_reading(lab);
    for (int again = 0; again < 2 && !right(r); ++again) {
      std::cerr << "probe read out of bounds, measuring again: " << r.line << "\n";
      r = auto_reading(lab);
    }
    EXPECT_TRUE(right(r)) << r.line;
  }
}

// A runoff on a 20 Mbit/s link (--compress-runoff 100: the closest other candidate is
// always run off): its measured pairs in the row, for the pipeline's driver and DDP's rank 0,
// and on a link this slow the smallest packets win the measurement too.
TEST(NetlabTest, AutoRunsTheClosestCandidateOffAndKeepsTheFaster) {
  SKIP_WITHOUT_LABS();
  Lab lab({"--hosts", "2", "--rate", "20mbit"});
  ASSERT_TRUE(lab.ok());
  const std::string metrics = "/tmp/dtrain-netlab-runoff-" + std::to_string(getpid()) + ".jsonl";
  const std::vector<std::vector<std::string>> modes = {
      {"--parallel", "pipeline", "--placement", "ushape", "--model", "cnn", "--limit-train", "1280",
       "--compress", "auto"},
      {"--parallel", "ddp", "--model", "mlp", "--limit-train", "2048", "--compress-grad", "auto"}};
  for (const auto& mode : modes) {
    SCOPED_TRACE(mode[1]);
    std::vector<std::string> argv{
        DTRAIN_BINARY, "train", "-n",           "2",   "--netlab",          lab.name(),
        "--epochs",    "1",     "--limit-test", "100", "--compress-runoff", "100",
        "--metrics",   metrics, "--no-progress"};
    argv.insert(argv.end(), mode.begin(), mode.end());
    Process train(argv);
    ASSERT_EQ(train.wait_for(300s), 0) << train.err();
    EXPECT_NE(train.err().find("runoff over "), std::string::npos) << train.err();
    const auto rows = testing::take_json_lines_file(metrics);
    ASSERT_EQ(rows.size(), 2u);
    ASSERT_FALSE(rows[0]["auto_links"].empty()) << rows[0].dump();
    for (const auto& l : rows[0]["auto_links"]) {
      EXPECT_GE(l["runoff_pairs"].get<int>(), 3) << l.dump();
      ASSERT_EQ(l["measured_step_s_by_codec"].size(), 2u) << l.dump();
      EXPECT_TRUE(l["measured_step_s_by_codec"].contains("sortquant:6:2")) << l.dump();
      EXPECT_EQ(l["codec"], "sortquant:6:2") << l.dump();
    }
  }
}

TEST(NetlabTest, RefusesWithoutRootSayingSo) {
  if (geteuid() != 0) {
    Process up({DTRAIN_BINARY, "netlab", "up", "x", "--hosts", "2"});
    EXPECT_NE(up.wait_for(30s), 0);
    EXPECT_NE(up.err().find("needs root"), std::string::npos) << up.err();
    return;
  }
  // As root: drop to nobody for this one command.
  Process up({"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", DTRAIN_BINARY,
              "netlab", "up", "x", "--hosts", "2"});
  EXPECT_NE(up.wait_for(30s), 0);
  EXPECT_NE(up.err().find("needs root"), std::string::npos) << up.err();
}

// bench p2p between the lab's two hosts: one-way latency of a 4 KiB message, microseconds.
double measured_latency_us(const Lab& lab) {
  Process p({DTRAIN_BINARY, "bench", "p2p", "-n", "2", "--netlab", lab.name(), "--sizes", "4K",
             "--iters", "20", "--warmup", "3", "--format", "jsonl", "--timeout", "60"});
  EXPECT_EQ(p.wait_for(120s), 0) << p.err();
  const auto rows = json_lines(p.out());
  EXPECT_EQ(rows.size(), 1u) << p.out();
  return rows.empty() ? 0 : rows[0]["latency_us"].get<double>();
}

// TCP segments host k has sent again since its namespace was made (/proc/net/snmp).
long retransmitted_segments(const Lab& lab, int host) {
  Process p({"ip", "netns", "exec", "dtrain-" + lab.name() + "-h" + std::to_string(host), "cat",
             "/proc/net/snmp"});
  EXPECT_EQ(p.wait_for(30s), 0) << p.err();
  std::istringstream in(p.out());
  std::string names, values;
  while (std::getline(in, names) && names.rfind("Tcp:", 0) != 0) {
  }
  std::getline(in, values);
  std::istringstream n(names), v(values);
  for (std::string name, value; n >> name && v >> value;)
    if (name == "RetransSegs") return std::stol(value);
  ADD_FAILURE() << "no RetransSegs in " << p.out();
  return -1;
}

nlohmann::json lab_state(const Lab& lab) {
  std::ifstream in("/run/dtrain/netlab/" + lab.name() + ".json");
  return nlohmann::json::parse(in);
}

// Delay and loss on this machine's kernel: by netem where it has it, else by dtrain's
// impairer (this development VM and CI). Either way the delay shows in bench p2p's one-way
// latency, and training over a lossy link ends exactly where it ends without loss.
TEST(NetlabTest, DelayShowsInTheLatencyAndLossLeavesTheResultAlone) {
  SKIP_WITHOUT_LABS();
  long impairer = 0;
  {
    Lab lab({"--hosts", "2", "--rate", "100mbit"});
    ASSERT_TRUE(lab.ok());
    const double base_us = measured_latency_us(lab);
    lab.run({"set", lab.name(), "--delay", "5ms"});
    const double delayed_us = measured_latency_us(lab);
    EXPECT_GT(delayed_us - base_us, 4500) << base_us << " -> " << delayed_us;
    EXPECT_LT(delayed_us - base_us, 6500) << base_us << " -> " << delayed_us;

    auto train = [&] {
      return one_epoch(&lab, {"--parallel", "ddp", "--model", "mlp", "--limit-train", "1024",
                              "--limit-test", "256", "--seed", "7"});
    };
    lab.run({"set", lab.name(), "--delay", "0", "--loss", "0"});
    const auto clean = train();
    lab.run({"set", lab.name(), "--loss", "2%"});
    const auto state = lab_state(lab);
    if (state.value("impairment", "") == "nfqueue") impairer = state.at("impairer_pid").get<long>();
    const long resent_before = retransmitted_segments(lab, 0) + retransmitted_segments(lab, 1);
    const auto lossy = train();
    const long resent =
        retransmitted_segments(lab, 0) + retransmitted_segments(lab, 1) - resent_before;
    EXPECT_GT(resent, 10) << "no packet was lost";
    for (const char* key : {"train_loss", "test_loss", "test_acc"})
      EXPECT_EQ(lossy.at(key), clean.at(key)) << key;
  }
  if (impairer > 0) {
    // Gone, or a zombie that this machine's init has yet to reap.
    std::ifstream stat("/proc/" + std::to_string(impairer) + "/stat");
    std::string line;
    std::getline(stat, line);
    const bool running = line.find("(dtrain-impair) ") != std::string::npos &&
                         line.find("(dtrain-impair) Z") == std::string::npos;
    EXPECT_FALSE(running) << "the lab is down, its impairer still runs: " << line;
  }
}

// Asking for netem (DTRAIN_NETLAB_IMPAIR=netem) where the kernel has none: refused, saying
// so, and nothing is left behind.
TEST(NetlabTest, NetemAskedForWhereThereIsNoneSaysSo) {
  SKIP_WITHOUT_LABS();
  const std::string name = "d" + std::to_string(getpid());
  Process up({DTRAIN_BINARY, "netlab", "up", name, "--hosts", "2", "--delay", "5ms"},
             {{"DTRAIN_NETLAB_IMPAIR", "netem"}});
  if (up.wait_for(60s) == 0) {
    Process down({DTRAIN_BINARY, "netlab", "down", name});
    EXPECT_EQ(down.wait_for(60s), 0);
    GTEST_SKIP() << "this kernel has netem";
  }
  EXPECT_NE(up.err().find("no netem qdisc"), std::string::npos) << up.err();
  for (const char* ns : {"-sw", "-h0", "-h1"})
    EXPECT_FALSE(namespace_exists("dtrain-" + name + ns)) << ns;
}

}  // namespace
}  // namespace dtrain
