// The lab's parsing and the commands it would run (no root needed: nothing is executed).
#include <gtest/gtest.h>

#include <algorithm>

#include "dtrain/netlab/plan.h"
#include "dtrain/netlab/spec.h"

namespace dtrain::netlab {
namespace {

TEST(NetlabSpecTest, ParsesRatesInTcUnits) {
  EXPECT_DOUBLE_EQ(parse_rate("100mbit"), 100e6);
  EXPECT_DOUBLE_EQ(parse_rate("1gbit"), 1e9);
  EXPECT_DOUBLE_EQ(parse_rate("20Mbit"), 20e6);
  EXPECT_DOUBLE_EQ(parse_rate("2.5gbit"), 2.5e9);
  EXPECT_DOUBLE_EQ(parse_rate("500kbit"), 500e3);
  EXPECT_DOUBLE_EQ(parse_rate("1000000"), 1e6);
  for (const char* bad :
       {"", "fast", "100mb", "100 mbit", "-1gbit", "0", "nanmbit", "1e12", "100mbit/s", " 1gbit"}) {
    EXPECT_THROW(parse_rate(bad), std::invalid_argument) << bad;
  }
}

TEST(NetlabSpecTest, ParsesDelaysAndLoss) {
  EXPECT_DOUBLE_EQ(parse_delay_ms("5ms"), 5);
  EXPECT_DOUBLE_EQ(parse_delay_ms("200us"), 0.2);
  EXPECT_DOUBLE_EQ(parse_delay_ms("1s"), 1000);
  EXPECT_DOUBLE_EQ(parse_delay_ms("7"), 7);
  EXPECT_DOUBLE_EQ(parse_loss_percent("2%"), 2);
  EXPECT_DOUBLE_EQ(parse_loss_percent("0.5"), 0.5);
  for (const char* bad : {"", "5min", "-1ms", "11s"})
    EXPECT_THROW(parse_delay_ms(bad), std::invalid_argument) << bad;
  for (const char* bad : {"", "100%", "-2%", "2%%", "two"})
    EXPECT_THROW(parse_loss_percent(bad), std::invalid_argument) << bad;
}

TEST(NetlabSpecTest, ChecksNamesAndHostCounts) {
  LabSpec spec;
  spec.name = "lab-1";
  EXPECT_NO_THROW(validate(spec));
  for (const char* bad : {"", "1lab", "Lab", "a b", "a/b", "averyveryverylongname"}) {
    spec.name = bad;
    EXPECT_THROW(validate(spec), std::invalid_argument) << bad;
  }
  spec.name = "ok";
  for (const int hosts : {0, 1, kMaxHosts + 1}) {
    spec.hosts = hosts;
    EXPECT_THROW(validate(spec), std::invalid_argument) << hosts;
  }
}

TEST(NetlabSpecTest, ChecksHostSettingsAndMergesThemByKey) {
  for (const char* good : {"net.ipv4.tcp_slow_start_after_idle=0",
                           "net.ipv4.tcp_rmem=4096 131072 67108864", "net.core.somaxconn=1024"})
    EXPECT_NO_THROW(check_host_sysctl(good)) << good;
  // Outside net.* a namespace's write would reach the machine's own kernel settings.
  for (const char* bad : {"", "net.ipv4.x", "net.ipv4.x=", "kernel.panic=1", "net..x=1",
                          "net.ipv4/../../kernel/x=1", "net.=1", "net.X=1", "net.x=1\nkernel"})
    EXPECT_THROW(check_host_sysctl(bad), std::invalid_argument) << bad;
  LabSpec spec;
  spec.name = "ok";
  spec.host_sysctls = {"kernel.panic=1"};
  EXPECT_THROW(validate(spec), std::invalid_argument);
  EXPECT_EQ(merge_host_sysctls({"net.a=1", "net.b=2"}, {"net.b=3", "net.c=4"}),
            (std::vector<std::string>{"net.a=1", "net.b=3", "net.c=4"}));
}

TEST(NetlabSpecTest, PrintsRates) {
  EXPECT_EQ(tc_rate(100e6), "100000000bit");
  EXPECT_EQ(human_rate(100e6), "100 Mbit/s");
  EXPECT_EQ(human_rate(2.5e9), "2.5 Gbit/s");
  EXPECT_EQ(human_rate(0), "unshaped");
  EXPECT_EQ(host_address(0), "10.200.0.1");
}

// Every command as one line, to search in.
std::vector<std::string> lines(const std::vector<Command>& commands) {
  std::vector<std::string> out;
  for (const auto& c : commands) {
    std::string line;
    for (const auto& a : c.argv)
      line += (line.empty() ? "" : " ") + a;
    out.push_back(line);
  }
  return out;
}

bool has(const std::vector<std::string>& lines, const std::string& text) {
  return std::any_of(lines.begin(), lines.end(),
                     [&](const std::string& l) { return l.find(text) != std::string::npos; });
}

// Lab "x" with `hosts` hosts at `rate_bps` (0: unshaped).
LabSpec lab_x(int hosts, double rate_bps) {
  LabSpec spec;
  spec.name = "x";
  spec.hosts = hosts;
  spec.rate_bps = rate_bps;
  return spec;
}

TEST(NetlabPlanTest, BuildsOneNamespacePerHostOnASwitchOfItsOwn) {
  const LabSpec spec = lab_x(3, 0);
  const auto build = lines(build_commands(spec));
  EXPECT_EQ(build.front(), "ip netns add dtrain-x-sw");
  for (int k = 0; k < 3; ++k) {
    const std::string ns = "dtrain-x-h" + std::to_string(k);
    EXPECT_TRUE(has(build, "ip netns add " + ns));
    EXPECT_TRUE(has(build, "ip -n " + ns + " link add eth0 type veth peer name port" +
                               std::to_string(k) + " netns dtrain-x-sw"));
    EXPECT_TRUE(
        has(build, "ip -n " + ns + " addr add 10.200.0." + std::to_string(k + 1) + "/24 dev eth0"));
    EXPECT_TRUE(has(build, "ip -n dtrain-x-sw link set port" + std::to_string(k) + " master br0"));
  }
  // Nothing is ever made in the caller's own namespace: every link command names one of ours.
  for (const auto& l : build)
    EXPECT_TRUE(l.rfind("ip netns add ", 0) == 0 || l.rfind("ip -n dtrain-x-", 0) == 0) << l;
  const auto remove = lines(remove_commands({"dtrain-x-h0", "dtrain-x-sw"}));
  EXPECT_EQ(remove,
            (std::vector<std::string>{"ip netns del dtrain-x-h0", "ip netns del dtrain-x-sw"}));
}

TEST(NetlabPlanTest, WritesEachHostSettingInEveryHostsNamespace) {
  LabSpec spec = lab_x(2, 0);
  spec.host_sysctls = {"net.ipv4.tcp_slow_start_after_idle=0", "net.ipv4.tcp_rmem=1 2 3"};
  const auto commands = sysctl_commands(spec);
  ASSERT_EQ(commands.size(), 4u);
  EXPECT_EQ(commands[0].argv,
            (std::vector<std::string>{"ip", "netns", "exec", "dtrain-x-h0", "sysctl", "-qw",
                                      "net.ipv4.tcp_slow_start_after_idle=0"}));
  EXPECT_EQ(commands[1].argv[3], "dtrain-x-h1");
  EXPECT_EQ(commands[3].argv.back(), "net.ipv4.tcp_rmem=1 2 3");
  EXPECT_TRUE(sysctl_commands(lab_x(2, 0)).empty());
}

TEST(NetlabPlanTest, ShapesEachDirectionWithTbfAndTheClientsUplinkApart) {
  LabSpec spec = lab_x(2, 100e6);
  spec.uplink_bps = 20e6;
  const auto shape = lines(shape_commands(spec, /*first_time=*/true, Impairment::kNetem));
  EXPECT_TRUE(has(shape,
                  "tc -n dtrain-x-h0 qdisc replace dev eth0 root handle 1: tbf rate "
                  "20000000bit"));
  EXPECT_TRUE(has(shape,
                  "tc -n dtrain-x-h1 qdisc replace dev eth0 root handle 1: tbf rate "
                  "100000000bit"));
  EXPECT_TRUE(has(shape,
                  "tc -n dtrain-x-sw qdisc replace dev port0 root handle 1: tbf rate "
                  "100000000bit"));
  EXPECT_TRUE(has(shape,
                  "tc -n dtrain-x-sw qdisc replace dev port1 root handle 1: tbf rate "
                  "100000000bit"));
  EXPECT_FALSE(has(shape, "netem"));
  EXPECT_FALSE(has(shape, " del "));
}

TEST(NetlabPlanTest, DelayAndLossGoOnUplinksWithTbfBelowNetem) {
  LabSpec spec = lab_x(2, 1e9);
  spec.delay_ms = 5;
  spec.loss_percent = 2;
  const auto commands = shape_commands(spec, /*first_time=*/false, Impairment::kNetem);
  const auto shape = lines(commands);
  EXPECT_TRUE(has(shape,
                  "tc -n dtrain-x-h0 qdisc replace dev eth0 root handle 1: netem limit "
                  "100000 delay 5ms loss 2%"));
  EXPECT_TRUE(has(shape, "tc -n dtrain-x-h0 qdisc replace dev eth0 parent 1:1 handle 10: tbf"));
  EXPECT_FALSE(has(shape, "dtrain-x-sw qdisc replace dev port0 root handle 1: netem"));
  // Removing a qdisc that may not exist is allowed to fail; nothing else is.
  for (const auto& c : commands)
    EXPECT_EQ(c.may_fail, c.argv[4] == "del") << lines({c})[0];
}

TEST(NetlabPlanTest, WithoutNetemUplinksKeepTbfAndSendEveryPacketToTheImpairer) {
  LabSpec spec = lab_x(2, 20e6);
  spec.delay_ms = 5;
  const auto shape = lines(shape_commands(spec, /*first_time=*/true, Impairment::kNfqueue));
  EXPECT_FALSE(has(shape, "netem"));
  EXPECT_TRUE(
      has(shape, "tc -n dtrain-x-h1 qdisc replace dev eth0 root handle 1: tbf rate 20000000bit"));
  auto rules = lines(nfqueue_commands(spec, 0));
  const std::string iptables = "ip netns exec dtrain-x-sw iptables -w ";
  EXPECT_TRUE(has(rules, iptables + "-F FORWARD"));
  EXPECT_TRUE(has(rules, iptables + "-A FORWARD -j NFQUEUE --queue-num 0"));
  EXPECT_TRUE(has(rules, "echo 1 > /proc/sys/net/bridge/bridge-nf-call-iptables"));
  // Nothing on the hosts: their own sockets must not see the delay as a local queue.
  EXPECT_FALSE(has(rules, "dtrain-x-h"));
  // Reshaped to neither: the rule goes, nothing is queued any more.
  spec.delay_ms = 0;
  rules = lines(nfqueue_commands(spec, 0));
  EXPECT_TRUE(has(rules, iptables + "-F FORWARD"));
  EXPECT_FALSE(has(rules, "NFQUEUE"));
}

TEST(NetlabPlanTest, BucketCoversTwoMillisecondsOfFastLinks) {
  EXPECT_EQ(tbf_burst_bytes(20e6), 64 * 1024);
  EXPECT_EQ(tbf_burst_bytes(10e9), 2'500'000);
}

}  // namespace
}  // namespace dtrain::netlab
