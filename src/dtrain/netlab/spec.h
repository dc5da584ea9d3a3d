// A network lab's description: how many hosts, and how each host's link to the lab's
// switch is shaped, per direction. Parsing and validation only; lab.h makes it real.
//
// Topology: every host is a network namespace with one interface (eth0, address
// 10.200.0.<k+1>/24) on a veth pair whose other end is a port of a bridge in the lab's own
// switch namespace. A host's *uplink* is its eth0 egress (host -> switch); its *downlink*
// is the switch port's egress (switch -> host). A message from host a to host b crosses a's
// uplink, then b's downlink. Rates are shaped with tbf on both; delay and loss are added
// once per packet between the two (netem on the uplink, or the impairer in the switch where
// the kernel has no netem: impairer.h), so the one-way delay between two hosts is `delay`
// and a round trip is twice that.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace dtrain::netlab {

struct LabSpec {
  std::string name;
  int hosts = 2;
  double rate_bps = 0;               // every link, both directions (bit/s); 0: unshaped
  std::optional<double> uplink_bps;  // host 0's uplink only (a client's slower uplink)
  double delay_ms = 0;               // one way, added on every uplink
  double loss_percent = 0;           // per packet, on every uplink
  // Kernel settings of every host, "key=value" (net.ipv4.tcp_slow_start_after_idle=0), in
  // order. Only net.* keys: a host is a network namespace, and those are its own.
  std::vector<std::string> host_sysctls;
};

constexpr int kMaxHosts = 64;

// "100mbit", "1gbit", "20Mbit", "500kbit", "2.5gbit", "1000000bit" or a bare number of
// bit/s. Throws std::invalid_argument naming the text.
double parse_rate(const std::string& text);
// "5ms", "0.5ms", "200us", "1s"; a bare number is milliseconds. Non-negative.
double parse_delay_ms(const std::string& text);
// "2%", "0.5%" or a bare percentage "2"; within [0, 100).
double parse_loss_percent(const std::string& text);
// Lower-case letters, digits and '-', 1..16 characters, starting with a letter: a lab's name
// becomes part of namespace and file names.
void check_lab_name(const std::string& name);
// "net.<key>=<value>", the key of lower-case letters, digits, '_', '-' and single dots.
// Throws std::invalid_argument naming the setting.
void check_host_sysctl(const std::string& setting);
// `settings` with each of `changes` in place of the setting of the same key, or appended.
std::vector<std::string> merge_host_sysctls(std::vector<std::string> settings,
                                            const std::vector<std::string>& changes);
// Throws std::invalid_argument when the spec cannot be built (host count, name, settings).
void validate(const LabSpec& spec);

// The rate as tc spells it ("100000000bit") and as people read it ("100 Mbit/s").
std::string tc_rate(double bps);
std::string human_rate(double bps);

// Host k's address inside the lab, and the lab's prefix length.
std::string host_address(int host);
constexpr int kPrefixLength = 24;

}  // namespace dtrain::netlab
