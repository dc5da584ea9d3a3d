// `dtrain netlab up|set|link|down|list`: a lab of network namespaces with shaped links
// (src/dtrain/netlab), on which `launch --netlab NAME` and `-n N --netlab NAME` run ranks.
#include <iostream>
#include <memory>

#include "dtrain/cli/commands.h"
#include "dtrain/cli/common.h"
#include "dtrain/netlab/lab.h"

namespace dtrain::cli {
namespace {

void print(const netlab::LabState& s) {
  std::cout << "lab " << s.spec.name << ": " << s.spec.hosts << " hosts, links "
            << netlab::human_rate(s.spec.rate_bps);
  if (s.spec.uplink_bps) std::cout << ", host 0 uplink " << netlab::human_rate(*s.spec.uplink_bps);
  if (s.spec.delay_ms > 0) std::cout << ", " << s.spec.delay_ms << " ms one way";
  if (s.spec.loss_percent > 0) std::cout << ", " << s.spec.loss_percent << " % loss";
  for (const auto& setting : s.spec.host_sysctls)
    std::cout << ", " << setting;
  if (s.impairment && netlab::impaired(s.spec)) {
    // kNfqueue is the fallback, but DTRAIN_NETLAB_IMPAIR can force it where netem exists:
    // name the mechanism, not the kernel's lack.
    std::cout << (*s.impairment == netlab::Impairment::kNetem
                      ? " (netem)"
                      : " (dtrain's impairer, pid " + std::to_string(s.impairer_pid) + ")");
  }
  std::cout << "\n";
  for (size_t k = 0; k < s.addresses.size(); ++k)
    std::cout << "  host " << k << "  " << s.addresses[k] << "  netns " << s.host_namespaces[k]
              << "\n";
}

// --rate, --uplink, --delay, --loss: parsed once into the spec.
void add_shape_flags(CLI::App* sub, netlab::LabSpec& spec) {
  add_typed_option(sub, "--rate", spec.rate_bps, netlab::parse_rate,
                   "every link's rate, both directions (100mbit, 1gbit)", "unshaped");
  sub->add_option_function<std::string>(
      "--uplink", [&spec](const std::string& t) { spec.uplink_bps = netlab::parse_rate(t); },
      "host 0's uplink rate (a client's slower uplink); default: --rate");
  add_typed_option(sub, "--delay", spec.delay_ms, netlab::parse_delay_ms,
                   "one-way delay added on every uplink (5ms): netem, else dtrain's impairer", "0");
  add_typed_option(sub, "--loss", spec.loss_percent, netlab::parse_loss_percent,
                   "packet loss on every uplink (2%): netem, else dtrain's impairer", "0");
  // Checked with the rest of the spec (netlab::validate), before anything is built or changed.
  sub->add_option("--sysctl", spec.host_sysctls,
                  "a kernel setting of every host, net.<key>=<value>, repeatable "
                  "(net.ipv4.tcp_slow_start_after_idle=0, net.ipv4.tcp_congestion_control=reno)");
}

}  // namespace

void register_netlab(CLI::App& parent, int& exit_code) {
  CLI::App* lab = parent.add_subcommand(
      "netlab",
      "a network lab: hosts as network namespaces on one switch, links shaped with tc (needs "
      "root); run ranks on it with --netlab NAME");
  lab->require_subcommand(1);

  auto spec = std::make_shared<netlab::LabSpec>();
  CLI::App* up = lab->add_subcommand("up", "build a lab and print its hosts' addresses");
  up->add_option("name", spec->name, "the lab's name")->required();
  up->add_option("--hosts", spec->hosts, "number of hosts")->capture_default_str();
  add_shape_flags(up, *spec);
  up->callback([spec, &exit_code] {
    print(netlab::bring_up(*spec));
    exit_code = 0;
  });

  auto reshaped = std::make_shared<netlab::LabSpec>();
  CLI::App* set = lab->add_subcommand(
      "set", "reshape a running lab's links in place (flags not given keep their values)");
  set->add_option("name", reshaped->name, "the lab's name")->required();
  add_shape_flags(set, *reshaped);
  set->callback([reshaped, set, &exit_code] {
    netlab::LabSpec next = netlab::load(reshaped->name).spec;
    if (set->count("--rate") > 0) next.rate_bps = reshaped->rate_bps;
    if (set->count("--uplink") > 0) next.uplink_bps = reshaped->uplink_bps;
    if (set->count("--delay") > 0) next.delay_ms = reshaped->delay_ms;
    if (set->count("--loss") > 0) next.loss_percent = reshaped->loss_percent;
    next.host_sysctls = netlab::merge_host_sysctls(next.host_sysctls, reshaped->host_sysctls);
    print(netlab::reshape(next));
    exit_code = 0;
  });

  auto link_name = std::make_shared<std::string>();
  auto link_host = std::make_shared<int>(0);
  auto link_state = std::make_shared<std::string>();
  CLI::App* link = lab->add_subcommand("link", "take a host's cable out (down) or back (up)");
  link->add_option("name", *link_name, "the lab's name")->required();
  link->add_option("host", *link_host, "host index")->required();
  link->add_option("state", *link_state, "up or down")
      ->required()
      ->check(CLI::IsMember({"up", "down"}));
  link->callback([=, &exit_code] {
    netlab::set_link(*link_name, *link_host, *link_state == "up");
    exit_code = 0;
  });

  auto down_name = std::make_shared<std::string>();
  CLI::App* down = lab->add_subcommand("down", "remove a lab: its namespaces, links and state");
  down->add_option("name", *down_name, "the lab's name")->required();
  down->callback([down_name, &exit_code] {
    netlab::tear_down(*down_name);
    std::cout << "lab " << *down_name << " removed\n";
    exit_code = 0;
  });

  CLI::App* list = lab->add_subcommand("list", "the labs that are up");
  list->callback([&exit_code] {
    const auto labs = netlab::list_labs();
    if (labs.empty()) std::cout << "no lab is up\n";
    for (const auto& s : labs)
      print(s);
    exit_code = 0;
  });
}

}  // namespace dtrain::cli
