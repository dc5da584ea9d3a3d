// The TCP congestion control of dtrain's own connections (WorldConfig::tcp_congestion,
// --tcp-congestion, DTRAIN_TCP_CONGESTION; docs/wire-format.md, "Congestion control").
//
// Why: a collective's messages are bursts after idle compute. bbr paces such an
// application-limited flow at the rate it last measured, so on a long link each burst leaves
// slower than the link could take it (a 1 MiB all-reduce between 2 ranks at 100 ms one way:
// 168 ms under bbr, 131 ms with reno set on bbr's sockets, whose kernel pacing stays on, 109 ms
// where the host runs reno); reno and cubic send a burst at their window. Under
// loss bbr keeps its rate where reno and cubic back off, so the host's choice stays the
// default and dtrain's connections change only when asked.
//
// Gloo opens its sockets itself and hands none of them out, so the connections are found as
// the TCP sockets that appeared in this process while a group connected (SocketsOpened):
// a store client cloned meanwhile is among them, which only changes how its few small
// requests leave.
#pragma once

#include <set>
#include <string>

namespace dtrain::comm {

// Throws std::invalid_argument naming the algorithms this host lets a process choose
// (/proc/sys/net/ipv4/tcp_allowed_congestion_control) where `algorithm` is not one of them.
// Empty: the host's default, always valid.
void check_tcp_congestion(const std::string& algorithm);

// What a job whose connections run `algorithm` (empty: the host's default) should know on
// this host, or "": reno and cubic restart an idle connection's window where
// net.ipv4.tcp_slow_start_after_idle is 1 (bbr ignores it), and a training step's first
// message follows idle compute (docs/wire-format.md, "Congestion control").
std::string idle_restart_advice(const std::string& algorithm);
// Prints idle_restart_advice to stderr, once per process at most. Connecting calls it on
// rank 0 where a link is long (several streams).
void advise_on_idle_restart(const std::string& algorithm);

// The sockets this process opens from construction on.
class SocketsOpened {
 public:
  SocketsOpened();  // notes the sockets open now
  // Sets `algorithm` on every TCP socket opened since construction and still open; returns
  // how many. Empty `algorithm`: none. Throws std::invalid_argument where the kernel refuses
  // it on one (as check_tcp_congestion would).
  int set_congestion(const std::string& algorithm) const;

 private:
  std::set<unsigned long> before_;  // socket inodes
};

}  // namespace dtrain::comm
