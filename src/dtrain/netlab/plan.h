// The commands that build, shape and remove a lab (see spec.h for the topology), as argv
// lists for `ip` and `tc`. Pure functions: lab.cpp runs them, tests read them.
#pragma once

#include <string>
#include <vector>

#include "dtrain/netlab/spec.h"

namespace dtrain::netlab {

// One `ip` or `tc` invocation. `may_fail`: removing what may not be there (a qdisc on an
// unshaped link) is not an error.
struct Command {
  std::vector<std::string> argv;
  bool may_fail = false;
};

// Namespace names: "dtrain-<lab>-sw" for the switch, "dtrain-<lab>-h<k>" for host k.
std::string switch_namespace(const std::string& lab);
std::string host_namespace(const std::string& lab, int host);
// The switch port of host k (inside the switch namespace).
std::string switch_port(int host);
// Every host's interface (inside its own namespace).
constexpr const char* kHostInterface = "eth0";

// Namespaces, bridge, veth pairs, addresses; no shaping.
std::vector<Command> build_commands(const LabSpec& spec);
// `sysctl -w` of each of spec.host_sysctls in every host's namespace, in order.
std::vector<Command> sysctl_commands(const LabSpec& spec);
// How a lab makes delay and loss: the kernel's netem qdisc where it has one, else dtrain's
// own impairer (impairer.h) behind an iptables NFQUEUE rule on every uplink.
enum class Impairment { kNetem, kNfqueue };

// tc commands that (re)shape every link to `spec` (qdiscs replaced in place, so a running
// job sees the new rate at once). `first_time`: no qdisc exists yet, nothing to delete.
// With kNfqueue the uplinks get tbf alone: the delay and loss happen before the qdisc.
std::vector<Command> shape_commands(const LabSpec& spec, bool first_time, Impairment how);
// For kNfqueue: while the spec has delay or loss, the switch sends every packet it forwards
// (each crossed one uplink) to queue `queue`, the impairer's, else straight on. In the switch,
// not on the host: a packet held on its sender's host still counts against the sender's
// socket (TCP small queues) and would cap the rate at a few packets per delay.
std::vector<Command> nfqueue_commands(const LabSpec& spec, int queue);
bool impaired(const LabSpec& spec);
// Removes these namespaces (a lab's, as found on the machine; their interfaces and qdiscs go
// with them).
std::vector<Command> remove_commands(const std::vector<std::string>& namespaces);
// Takes host k's cable out of the switch (down) or puts it back (up).
Command link_command(const std::string& lab, int host, bool up);

// tbf's bucket: at least 64 KiB, and 2 ms worth of the rate (a smaller bucket caps fast
// links below their rate because the kernel refills it only on timer ticks).
long tbf_burst_bytes(double bps);

}  // namespace dtrain::netlab
