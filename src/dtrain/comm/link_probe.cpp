#include "dtrain/comm/link_probe.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "dtrain/comm/group.h"
#include "dtrain/comm/tags.h"
#include "dtrain/comm/world.h"
#include "dtrain/metrics/timer.h"

namespace dtrain::comm {
namespace {

constexpr int64_t kSmallBytes = 128 * 1024, kLargeBytes = 512 * 1024;
// Rounds go on (best of each time kept) until they add up to this long, at most kRounds:
// one round on a slow link, several on a fast one, where a scheduler hiccup would
// otherwise decide the rate.
constexpr int kRounds = 8;
constexpr double kLongEnoughS = 0.05;
// A link that carries the large message in less than this gets sizes kFastScale times
// larger from the next round on (the earlier rounds dropped): on a 1 Gbit/s lab link a
// token bucket's 2 ms burst (250 KB) covered most of the small message, and the probe read
// 1.2-1.3 Gbit/s.
constexpr double kFastLinkS = 0.016;
constexpr int64_t kFastScale = 8;
// Both ways at once, the scaled rounds go on (up to this many) while the two directions
// read more than kUnevenBy apart. Two TCP directions through shaped queues often share the
// link unevenly: each one's acknowledgements queue behind the other's data, and in about
// half the rounds one direction ran at 1000-1040 Mbit/s on a 1 Gbit/s lab link while the
// other read 740-860 (their sum stays 1770-1880). One round read the slower direction at
// 634-783 about once in 6 probes; rounds repeated until even read 880-980. A link whose
// directions differ for real costs the extra rounds and reads the same.
constexpr int kUnevenScaledRounds = 3;
constexpr double kUnevenBy = 1.1;
// Duplex::kBothWaysAtOnce keeps going both ways in the scaled rounds only where the first
// round read the link below this: faster ones are memory copies (loopback: 25-85 Gbit/s),
// where traffic both ways measures the cores copying it, and read loopback slow enough for
// fp16 to look better than none on the mlp
// (DdpE2eTest.CompressGradAutoKeepsTheExactAllReduceOnLoopback).
constexpr double kBothWaysBelowBytesPerS = 5e9 / 8;

double rate_of(const double (&seconds)[2], int64_t scale) {
  return static_cast<double>(scale * (kLargeBytes - kSmallBytes)) /
         std::max(seconds[1] - seconds[0], 1e-7);
}

// The initiator sends `out` and waits for `in`; the peer mirrors: receives, then answers.
// Returns the seconds it took.
double exchange(Group& g, int peer, bool initiator, at::Tensor& out, int out_tag, at::Tensor& in,
                int in_tag) {
  const auto t0 = metrics::Clock::now();
  if (initiator) {
    g.send(out, peer, out_tag);
    g.recv(in, peer, in_tag);
  } else {
    g.recv(out, peer, out_tag);
    g.send(in, peer, in_tag);
  }
  return metrics::since(t0);
}

// Both ways at once: after a ping round trip, each rank sends `out` while receiving `in`.
// Returns the seconds until this rank's receive completed (the peer's direction). The peer
// starts about one latency before the initiator, the same for every size: the difference
// of two sizes' times drops it.
double both_ways(Group& g, int peer, bool initiator, at::Tensor& out, at::Tensor& in, int data_tag,
                 at::Tensor& ping, int ping_tag) {
  exchange(g, peer, initiator, ping, ping_tag, ping, ping_tag);
  const auto t0 = metrics::Clock::now();
  Request receive = g.irecv(in, peer, data_tag);
  Request send = g.isend(out, peer, data_tag);
  receive.wait();
  const double seconds = metrics::since(t0);
  send.wait();
  return seconds;
}

// Rounds of the circle method: in round r, rank i meets partner(i, r) (ranks padded to an even
// count; a rank whose partner is the pad sits the round out).
int partner(int rank, int round, int padded) {
  if (rank == padded - 1) return round;
  if (rank == round) return padded - 1;
  return ((2 * round - rank) % (padded - 1) + (padded - 1)) % (padded - 1);
}

}  // namespace

LinkProbe probe_link(Group& g, int peer, bool initiator, int ping_tag, int data_tag,
                     Duplex duplex) {
  at::Tensor ping = at::zeros({8}, at::kByte);
  int64_t scale = 1;
  at::Tensor data[2] = {at::zeros({kSmallBytes}, at::kByte), at::zeros({kLargeBytes}, at::kByte)};
  at::Tensor inbox[2];  // both ways: what the peer sends while this rank sends data[]
  bool together = duplex == Duplex::kBothWaysAtOnce;
  if (together) inbox[0] = at::empty_like(data[0]), inbox[1] = at::empty_like(data[1]);
  // Both ways: the peer's best receive times (the initiator's out direction) so far.
  at::Tensor report = at::empty({2}, at::kDouble);
  auto exchange = [&](at::Tensor& out, int out_tag, at::Tensor& in, int in_tag) {
    return comm::exchange(g, peer, initiator, out, out_tag, in, in_tag);
  };
  double rtt = 1e30, out[2] = {1e30, 1e30}, in[2] = {1e30, 1e30};
  const auto start = metrics::Clock::now();
  int scaled_rounds = 0;
  for (int round = 0; round < kRounds; ++round) {
    rtt = std::min(rtt, exchange(ping, ping_tag, ping, ping_tag));
    for (int size = 0; size < 2; ++size) {
      if (together) {
        in[size] = std::min(in[size], both_ways(g, peer, initiator, data[size], inbox[size],
                                                data_tag, ping, ping_tag));
      } else {
        out[size] = std::min(out[size], exchange(data[size], data_tag, ping, ping_tag));
        in[size] = std::min(in[size], exchange(ping, ping_tag, data[size], data_tag));
      }
    }
    if (together) {  // the peer's receive times are the initiator's out direction
      if (initiator) {
        g.recv(report, peer, data_tag);
        out[0] = report[0].item<double>();
        out[1] = report[1].item<double>();
      } else {
        report[0] = in[0];
        report[1] = in[1];
        g.send(report, peer, data_tag);
      }
    }
    // Both ends see nearly the same times, but must agree on what comes next: the
    // initiator decides and tells the peer in the next ping (byte 0: stop; byte 1: scale up;
    // byte 2: the scaled rounds go both ways at once).
    auto* const says = ping.data_ptr<uint8_t>();
    says[1] = initiator && scale == 1 && std::max(out[1], in[1]) < kFastLinkS ? 1 : 0;
    says[2] = says[1] != 0 && duplex == Duplex::kBothWaysAtOnce &&
                      std::min(rate_of(out, 1), rate_of(in, 1)) < kBothWaysBelowBytesPerS
                  ? 1
                  : 0;
    // Both ways at once, each direction got as much time on the wire in half the time.
    const double long_enough = together ? kLongEnoughS / 2 : kLongEnoughS;
    if (scale > 1) ++scaled_rounds;
    const double faster = std::max(rate_of(out, scale), rate_of(in, scale));
    const bool uneven =
        together && faster > kUnevenBy * std::min(rate_of(out, scale), rate_of(in, scale));
    const bool enough_rounds = scale == 1 || !uneven || scaled_rounds >= kUnevenScaledRounds;
    says[0] =
        initiator && says[1] == 0 && enough_rounds && metrics::since(start) > long_enough ? 1 : 0;
    exchange(ping, ping_tag, ping, ping_tag);
    if (says[1] != 0) {
      scale = kFastScale;
      data[0] = at::zeros({scale * kSmallBytes}, at::kByte);
      data[1] = at::zeros({scale * kLargeBytes}, at::kByte);
      together = says[2] != 0;
      if (together) inbox[0] = at::empty_like(data[0]), inbox[1] = at::empty_like(data[1]);
      out[0] = out[1] = in[0] = in[1] = 1e30;
      says[1] = says[2] = 0;
      continue;
    }
    if (says[0] != 0) break;
  }
  if (!initiator) return {};
  return {rate_of(out, scale), rate_of(in, scale), rtt / 2};
}

SlowestLink probe_slowest_from_rank0(Group& group, int ping_tag, int data_tag) {
  SlowestLink s;
  for (int r = 1; r < group.size(); ++r) {
    if (group.rank() != 0 && group.rank() != r) continue;
    const LinkProbe p = probe_link(group, group.rank() == 0 ? r : 0, group.rank() == 0, ping_tag,
                                   data_tag, Duplex::kBothWaysAtOnce);
    if (group.rank() != 0) continue;
    if (p.out_bytes_per_s < s.rate_bytes_per_s)
      s = {0, r, p.out_bytes_per_s, p.latency_s, s.longest_latency_s};
    if (p.in_bytes_per_s < s.rate_bytes_per_s)
      s = {r, 0, p.in_bytes_per_s, p.latency_s, s.longest_latency_s};
    s.longest_latency_s = std::max(s.longest_latency_s, p.latency_s);
  }
  return s;
}

double probe_latency(Group& g, int peer, bool initiator, int ping_tag) {
  at::Tensor ping = at::zeros({8}, at::kByte);
  double rtt = 1e30;
  for (int i = 0; i < 3; ++i)
    rtt = std::min(rtt, exchange(g, peer, initiator, ping, ping_tag, ping, ping_tag));
  return rtt / 2;
}

void measure_round_trips(Group& group) {
  const int p = group.size(), padded = p + p % 2;
  const int tag = connect_probe_tag();
  for (int round = 0; round + 1 < padded; ++round) {
    const int peer = partner(group.rank(), round, padded);
    if (peer >= p || peer == group.rank()) continue;
    // Both ends keep the initiator's measurement: what is decided from it per link (its
    // streams, its openings) must be decided alike at both ends, also near a threshold.
    const bool initiator = group.rank() < peer;
    at::Tensor round_trip =
        at::full({1}, 2 * probe_latency(group, peer, initiator, tag), at::kDouble);
    if (initiator) {
      group.send(round_trip, peer, tag);
    } else {
      group.recv(round_trip, peer, tag);
    }
    group.set_round_trip(peer, round_trip.item<double>());
  }
}

void configure_streams(Group& group, bool everywhere, bool openings) {
  measure_round_trips(group);
  for (int peer = 0; peer < group.size(); ++peer) {
    if (peer == group.rank()) continue;
    const bool long_link = group.round_trip(peer) >= kLongRttSeconds;
    if (everywhere || long_link) group.set_streams(peer, group.stream_capacity());
    if (long_link && openings) group.set_opening_capacity(peer, Group::kOpeningBytes);
  }
}

}  // namespace dtrain::comm
