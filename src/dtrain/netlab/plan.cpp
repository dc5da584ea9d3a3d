#include "dtrain/netlab/plan.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace dtrain::netlab {
namespace {

std::string number(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

Command tbf(const std::string& ns, const std::string& dev, const std::string& parent, double bps) {
  std::vector<std::string> c{"tc", "-n", ns, "qdisc", "replace", "dev", dev};
  if (parent == "root") {
    c.insert(c.end(), {"root", "handle", "1:"});
  } else {
    c.insert(c.end(), {"parent", parent, "handle", "10:"});
  }
  c.insert(c.end(), {"tbf", "rate", tc_rate(bps), "burst", std::to_string(tbf_burst_bytes(bps)),
                     "latency", "100ms"});
  return {c};
}

Command remove_root_qdisc(const std::string& ns, const std::string& dev) {
  return {{"tc", "-n", ns, "qdisc", "del", "dev", dev, "root"}, /*may_fail=*/true};
}

// Host k's uplink: netem (delay, loss) at the root with tbf below it, or tbf alone.
std::vector<Command> uplink_commands(const LabSpec& spec, int host, bool first_time,
                                     Impairment how) {
  const std::string ns = host_namespace(spec.name, host);
  const double bps = host == 0 && spec.uplink_bps ? *spec.uplink_bps : spec.rate_bps;
  const bool netem = how == Impairment::kNetem && impaired(spec);
  std::vector<Command> out;
  // A root qdisc of another kind cannot be changed in place: start from none.
  if (!first_time) out.push_back(remove_root_qdisc(ns, kHostInterface));
  if (netem) {
    out.push_back({{"tc", "-n", ns, "qdisc", "replace", "dev", kHostInterface, "root", "handle",
                    "1:", "netem", "limit", "100000", "delay", number(spec.delay_ms) + "ms", "loss",
                    number(spec.loss_percent) + "%"}});
    if (bps > 0) out.push_back(tbf(ns, kHostInterface, "1:1", bps));
  } else if (bps > 0) {
    out.push_back(tbf(ns, kHostInterface, "root", bps));
  }
  return out;
}

}  // namespace

std::string switch_namespace(const std::string& lab) {
  return "dtrain-" + lab + "-sw";
}

std::string host_namespace(const std::string& lab, int host) {
  return "dtrain-" + lab + "-h" + std::to_string(host);
}

std::string switch_port(int host) {
  return "port" + std::to_string(host);
}

long tbf_burst_bytes(double bps) {
  return std::max<long>(64 * 1024, std::lround(bps / 8 * 0.002));
}

std::vector<Command> build_commands(const LabSpec& spec) {
  const std::string sw = switch_namespace(spec.name);
  std::vector<Command> out{
      {{"ip", "netns", "add", sw}},
      {{"ip", "-n", sw, "link", "set", "lo", "up"}},
      {{"ip", "-n", sw, "link", "add", "br0", "type", "bridge"}},
      {{"ip", "-n", sw, "link", "set", "br0", "up"}},
  };
  for (int k = 0; k < spec.hosts; ++k) {
    const std::string ns = host_namespace(spec.name, k);
    const std::string port = switch_port(k);
    const std::vector<Command> host{
        {{"ip", "netns", "add", ns}},
        {{"ip", "-n", ns, "link", "set", "lo", "up"}},
        {{"ip", "-n", ns, "link", "add", kHostInterface, "type", "veth", "peer", "name", port,
          "netns", sw}},
        {{"ip", "-n", sw, "link", "set", port, "master", "br0"}},
        {{"ip", "-n", sw, "link", "set", port, "up"}},
        {{"ip", "-n", ns, "addr", "add", host_address(k) + "/" + std::to_string(kPrefixLength),
          "dev", kHostInterface}},
        {{"ip", "-n", ns, "link", "set", kHostInterface, "up"}},
    };
    out.insert(out.end(), host.begin(), host.end());
  }
  return out;
}

std::vector<Command> sysctl_commands(const LabSpec& spec) {
  std::vector<Command> out;
  for (const auto& setting : spec.host_sysctls)
    for (int k = 0; k < spec.hosts; ++k)
      out.push_back(
          {{"ip", "netns", "exec", host_namespace(spec.name, k), "sysctl", "-qw", setting}});
  return out;
}

bool impaired(const LabSpec& spec) {
  return spec.delay_ms > 0 || spec.loss_percent > 0;
}

std::vector<Command> shape_commands(const LabSpec& spec, bool first_time, Impairment how) {
  std::vector<Command> out;
  const std::string sw = switch_namespace(spec.name);
  for (int k = 0; k < spec.hosts; ++k) {
    const auto up = uplink_commands(spec, k, first_time, how);
    out.insert(out.end(), up.begin(), up.end());
    if (!first_time) out.push_back(remove_root_qdisc(sw, switch_port(k)));
    if (spec.rate_bps > 0) out.push_back(tbf(sw, switch_port(k), "root", spec.rate_bps));
  }
  return out;
}

std::vector<Command> nfqueue_commands(const LabSpec& spec, int queue) {
  const std::string sw = switch_namespace(spec.name);
  const std::vector<std::string> iptables{"ip", "netns", "exec", sw, "iptables", "-w"};
  std::vector<std::string> flush = iptables;
  flush.insert(flush.end(), {"-F", "FORWARD"});
  std::vector<Command> out{
      // Bridged IPv4 passes the switch's iptables through br_netfilter: load it where it is a
      // module (built in here, and modprobe may be missing), then turn it on for the switch.
      {{"modprobe", "-q", "br_netfilter"}, /*may_fail=*/true},
      {{"ip", "netns", "exec", sw, "sh", "-c",
        "echo 1 > /proc/sys/net/bridge/bridge-nf-call-iptables"}},
      {flush}};
  if (impaired(spec)) {
    std::vector<std::string> rule = iptables;
    rule.insert(rule.end(),
                {"-A", "FORWARD", "-j", "NFQUEUE", "--queue-num", std::to_string(queue)});
    out.push_back({rule});
  }
  return out;
}

std::vector<Command> remove_commands(const std::vector<std::string>& namespaces) {
  std::vector<Command> out;
  for (const auto& ns : namespaces)
    out.push_back({{"ip", "netns", "del", ns}});
  return out;
}

Command link_command(const std::string& lab, int host, bool up) {
  return {
      {"ip", "-n", switch_namespace(lab), "link", "set", switch_port(host), up ? "up" : "down"}};
}

}  // namespace dtrain::netlab
