#include "dtrain/comm/link_probe.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "dtrain/comm/group.h"
#include "dtrain/comm/tags.h"
#include "dtrain/comm/world.h"
#include "dtrain/metrics/timer.h"

namespace dtrain::comm {
namespace {

// A ping whose receive is posted before the previous answer went out: Gloo sends a message
// only once the receiver's notice has arrived, so a ping-pong posted as it goes costs two
// round trips, and a probe of few pings read a long link's one-way delay as its round trip
// (10.2 ms on a 5 ms link). Posted ahead, each ping after the first costs one round trip.
// The round trip is the least of them: a ping only ever reads long (a process or the lab's
// impairer descheduled, a queue ahead of it). On a short link four pings are too few to find a
// quiet moment on a loaded 2-core machine (a CI run read a 0 ms lab link's round trip as
// 5-6 ms beside DiLoCo's first exchanges), so pings go on while they have taken under
// kPingForS, up to kMostPings; a 5 ms link's four pings already take 40 ms.
constexpr int kPings = 4;
constexpr int kMostPings = 32;
constexpr double kPingForS = 0.02;

// A round trip measured at connect under this is measured again (its pings cost 20-40 ms)
// and the lesser kept: at connect both ranks are still starting, and on a loaded
// 2-core CI machine a 0 ms lab link read 4 ms there, twice. Longer ones are kept as read.
constexpr double kPingAgainBelowRtt = 0.01;

// Trains: kTrainMessages messages back to back, every receive posted first; the receiver
// times the arrivals after the first message, free of its latency and of a window's ramp
// (slow start, a token bucket's burst) that the first message absorbs. Arrivals are only ever
// late, never early: a lost packet holds back what follows it until the retransmission comes
// (through a shaped queue, a whole queue's delay), and then several messages complete at
// once. A late start would read the link fast, so the rate is the lowest over the starts in
// the train's first half (the end is the last arrival in each).
constexpr int kTrainMessages = 8;
constexpr int64_t kFirstTrainBytes = 512 * 1024;
constexpr int64_t kMostTrainBytes = int64_t{32} << 20;
// On a link of 100 ms or more round trip, the first train's pieces are large enough to be
// striped over the link's connections (Group::kStripeMinBytes): 64 KiB pieces all go by one
// connection, whose slow start from its initial window took 1.3 s to carry 512 KiB each way
// over a 50 Mbit/s, 100 ms link (reading 8 Mbit/s, too short to count). A 2 MiB first train
// there reads 36-38 Mbit/s and the probe ends 0.9 s sooner; on a 25 ms link 512 KiB reads right.
constexpr double kStripedFirstTrainRtt = 0.1;
constexpr int64_t kStripedFirstTrainBytes = kTrainMessages * Group::kStripeMinBytes;
// A train's second half (the shortest span timed) must take this long, and two round trips, to be
// read; shorter ones are repeated larger (at most kTrainRounds trains a direction). What holds
// a train back makes it read low: TCP's slow start on a long link (a 512 KiB first train read
// a 50 Mbit/s, 25 ms link at 13-18 Mbit/s in 3 runs of 8, and took long enough to count), a
// loss, a descheduled process. So each direction's rate is the best of kReadings trains long
// enough to be read; the second starts with the window the first opened. (A train reads high
// only by a little: on a 100 ms link, striped, a lagging connection catching up read 50 Mbit/s
// as up to 61.)
// On a long link (kStripedFirstTrainRtt or more) a train costs a second or more (a 50 Mbit/s,
// 100 ms link: 1.2 s, most of it round trips), and one reading suffices where a train before
// it opened the window: there the second reading matched the first to within 1 % (47.4 and
// 47.3 Mbit/s in, 50.5 and 51.4 out) and cost 1.2 s of a probe that auto's first exchange
// waits for.
constexpr double kLongEnoughS = 0.01;
constexpr int kTrainRounds = 4;
constexpr int kReadings = 2;
// Both ways at once, directions that read more than kUnevenBy apart are measured again (at
// most kTrainRounds): through shaped queues each direction's acknowledgements wait behind the
// other's data, and one round often shares a 1 Gbit/s lab link 1000 / 800 Mbit/s.
constexpr double kUnevenBy = 1.1;
// Both ways at once only below this rate: faster "links" are memory copies (loopback,
// 25-85 Gbit/s), where traffic both ways measures the cores copying it.
constexpr double kBothWaysBelowBytesPerS = 5e9 / 8;

// Rounds of the circle method: in round r, rank i meets partner(i, r) (ranks padded to an even
// count; a rank whose partner is the pad sits the round out).
int partner(int rank, int round, int padded) {
  if (rank == padded - 1) return round;
  if (rank == round) return padded - 1;
  return ((2 * round - rank) % (padded - 1) + (padded - 1)) % (padded - 1);
}

// What a train's receiver saw: the rate (above), and the shortest span it timed.
struct Arrivals {
  double rate = 0, seconds = 0;
};

// One train each way that is asked for: `send` this rank's, `receive` the peer's, at once.
Arrivals train(Group& g, int peer, bool send, bool receive, int64_t bytes, int tag) {
  const int64_t piece = bytes / kTrainMessages;
  std::vector<at::Tensor> in;
  std::vector<Request> receives, sends;
  if (receive)
    for (int i = 0; i < kTrainMessages; ++i) {
      in.push_back(at::empty({piece}, at::kByte));
      receives.push_back(g.irecv(in.back(), peer, tag));
    }
  const at::Tensor out = at::zeros({piece}, at::kByte);
  if (send)
    for (int i = 0; i < kTrainMessages; ++i)
      sends.push_back(g.isend(out, peer, tag));
  std::vector<metrics::Clock::time_point> arrived;
  for (auto& r : receives) {
    r.wait();
    arrived.push_back(metrics::Clock::now());
  }
  for (auto& s : sends)
    s.wait();
  Arrivals a;
  if (!receive) return a;
  constexpr int last = kTrainMessages - 1;
  const auto span = [&](int from) {
    return std::max(std::chrono::duration<double>(arrived[last] - arrived[from]).count(), 1e-7);
  };
  a.rate = 1e30;
  for (int from = 1; from <= kTrainMessages / 2 - 1; ++from)
    a.rate = std::min(a.rate, static_cast<double>(piece * (last - from)) / span(from));
  a.seconds = span(kTrainMessages / 2 - 1);
  return a;
}

// Three numbers one way (a reading, a verdict), into a receive posted ahead.
void tell(Group& g, int peer, std::array<double, 3> values, int tag) {
  g.send(at::tensor({values[0], values[1], values[2]}, at::kDouble), peer, tag);
}
std::array<double, 3> heard(Request& posted, const at::Tensor& into) {
  posted.wait();
  return {into[0].item<double>(), into[1].item<double>(), into[2].item<double>()};
}

}  // namespace

double probe_round_trip(Group& g, int peer, bool initiator, int tag) {
  // A ping's first byte says whether another follows: the peer posts the next receive before
  // it answers, so that ping finds its notice there.
  at::Tensor ping = at::zeros({8}, at::kByte);
  at::Tensor in[2] = {at::empty({8}, at::kByte), at::empty({8}, at::kByte)};
  Request posted = g.irecv(in[0], peer, tag);
  double best = 1e30;
  const auto start = metrics::Clock::now();
  for (int i = 0;; ++i) {
    Request next;
    bool more = false;
    if (initiator) {
      more = i + 1 < kMostPings && (i + 1 < kPings || metrics::since(start) < kPingForS);
      if (more) next = g.irecv(in[(i + 1) % 2], peer, tag);
      ping[0] = more ? 1 : 0;
      const auto t0 = metrics::Clock::now();
      g.send(ping, peer, tag);
      posted.wait();
      if (i > 0) best = std::min(best, metrics::since(t0));  // the first waited for notices
    } else {
      posted.wait();
      more = in[i % 2][0].item<uint8_t>() != 0;
      if (more) next = g.irecv(in[(i + 1) % 2], peer, tag);
      g.send(ping, peer, tag);
    }
    if (!more) break;
    posted = std::move(next);
  }
  // Both ends keep the initiator's measurement.
  at::Tensor result = at::full({1}, best, at::kDouble);
  if (initiator)
    g.send(result, peer, tag);
  else
    g.recv(result, peer, tag);
  return result.item<double>();
}

double probe_latency(Group& g, int peer, bool initiator, int ping_tag) {
  return probe_round_trip(g, peer, initiator, ping_tag) / 2;
}

LinkProbe probe_link(Group& g, int peer, bool initiator, int ping_tag, int data_tag, Duplex duplex,
                     RoundTrip round_trip) {
  // Group::round_trip is the same at both ends, so both decide alike whether to ping.
  double rtt = round_trip == RoundTrip::kFromGroup ? g.round_trip(peer) : -1;
  if (rtt < 0) rtt = probe_round_trip(g, peer, initiator, ping_tag);
  const double target = std::max(kLongEnoughS, rtt);
  bool together = duplex == Duplex::kBothWaysAtOnce;
  const bool long_link = rtt >= kStripedFirstTrainRtt;
  double bytes = long_link ? kStripedFirstTrainBytes : kFirstTrainBytes;
  LinkProbe p;
  p.latency_s = rtt / 2;
  int readings = 0;      // trains long enough to be read
  bool settled = false;  // enough of them
  for (int round = 0; round < kTrainRounds; ++round) {
    // After each round the peer tells the initiator what it received, and the initiator
    // tells the peer what comes next: one round trip, into receives posted now.
    at::Tensor told = at::empty({3}, at::kDouble);
    Request posted = g.irecv(told, peer, ping_tag);
    const auto n = static_cast<int64_t>(bytes);
    Arrivals in;  // the train this rank received
    if (together) {
      in = train(g, peer, true, true, n, data_tag);
    } else {  // the initiator's train out, then the peer's back
      const Arrivals first = train(g, peer, initiator, !initiator, n, data_tag);
      const Arrivals second = train(g, peer, !initiator, initiator, n, data_tag);
      in = initiator ? second : first;
    }
    if (!initiator) {
      tell(g, peer, {in.rate, in.seconds, 0}, ping_tag);
      const auto decided = heard(posted, told);
      if (decided[0] != 0) break;
      bytes = decided[1];
      together = decided[2] != 0;
      continue;
    }
    const auto seen = heard(posted, told);
    const Arrivals out{seen[0], seen[1]};  // this rank's train, as the peer received it
    // Stop, or the next train's bytes and whether it still goes both ways.
    const double shortest = std::min(in.seconds, out.seconds);
    const bool long_enough = shortest >= target;
    if (long_enough) {
      p.out_bytes_per_s = readings == 0 ? out.rate : std::max(p.out_bytes_per_s, out.rate);
      p.in_bytes_per_s = readings == 0 ? in.rate : std::max(p.in_bytes_per_s, in.rate);
      ++readings;
      settled = settled || readings >= kReadings || (long_link && round > 0);
    } else if (readings == 0) {  // provisional, should no train be long enough
      p.out_bytes_per_s = out.rate;
      p.in_bytes_per_s = in.rate;
    }
    const double slower = std::min(p.in_bytes_per_s, p.out_bytes_per_s);
    const double faster = std::max(p.in_bytes_per_s, p.out_bytes_per_s);
    const bool uneven = together && faster > kUnevenBy * slower;
    const bool stop = (settled && !uneven) || bytes >= kMostTrainBytes;
    // Long enough at the rate seen, twice over (a first train may read low), and at least
    // twice as long as this one.
    const double grain = kTrainMessages * 65536.0;
    const double wanted = long_enough ? bytes : bytes * std::max(2.0, 2 * target / shortest);
    bytes = std::min<double>(kMostTrainBytes, std::ceil(wanted / grain) * grain);
    together = together && std::min(in.rate, out.rate) < kBothWaysBelowBytesPerS;
    tell(g, peer, {stop ? 1.0 : 0.0, bytes, together ? 1.0 : 0.0}, ping_tag);
    if (stop) break;
  }
  if (!initiator) return {};
  return p;
}

SlowestLink probe_slowest_from_rank0(Group& group, int ping_tag, int data_tag,
                                     RoundTrip round_trip) {
  SlowestLink s;
  for (int r = 1; r < group.size(); ++r) {
    if (group.rank() != 0 && group.rank() != r) continue;
    const LinkProbe p = probe_link(group, group.rank() == 0 ? r : 0, group.rank() == 0, ping_tag,
                                   data_tag, Duplex::kBothWaysAtOnce, round_trip);
    if (group.rank() != 0) continue;
    if (p.out_bytes_per_s < s.rate_bytes_per_s)
      s = {0, r, p.out_bytes_per_s, p.latency_s, s.longest_latency_s};
    if (p.in_bytes_per_s < s.rate_bytes_per_s)
      s = {r, 0, p.in_bytes_per_s, p.latency_s, s.longest_latency_s};
    s.longest_latency_s = std::max(s.longest_latency_s, p.latency_s);
  }
  return s;
}

void refresh_short_round_trips_from_rank0(Group& group, int ping_tag) {
  for (int r = 1; r < group.size(); ++r) {
    if (group.rank() != 0 && group.rank() != r) continue;
    const int peer = group.rank() == 0 ? r : 0;
    const double held = group.round_trip(peer);  // the same at both ends
    if (held >= kPingAgainBelowRtt) continue;
    const double pinged = probe_round_trip(group, peer, group.rank() == 0, ping_tag);
    group.set_round_trip(peer, held >= 0 ? std::min(held, pinged) : pinged);
  }
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
    group.set_round_trip(peer, probe_round_trip(group, peer, initiator, tag));
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
