#include "dtrain/comm/link_probe.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "dtrain/comm/group.h"
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

}  // namespace

LinkProbe probe_link(Group& g, int peer, bool initiator, int ping_tag, int data_tag) {
  at::Tensor ping = at::zeros({8}, at::kByte);
  int64_t scale = 1;
  at::Tensor data[2] = {at::zeros({kSmallBytes}, at::kByte), at::zeros({kLargeBytes}, at::kByte)};
  auto exchange = [&](at::Tensor& out, int out_tag, at::Tensor& in, int in_tag) {
    return comm::exchange(g, peer, initiator, out, out_tag, in, in_tag);
  };
  double rtt = 1e30, out[2] = {1e30, 1e30}, in[2] = {1e30, 1e30};
  const auto start = metrics::Clock::now();
  for (int round = 0; round < kRounds; ++round) {
    rtt = std::min(rtt, exchange(ping, ping_tag, ping, ping_tag));
    for (int size = 0; size < 2; ++size) {
      out[size] = std::min(out[size], exchange(data[size], data_tag, ping, ping_tag));
      in[size] = std::min(in[size], exchange(ping, ping_tag, data[size], data_tag));
    }
    // Both ends see nearly the same times, but must agree on what comes next: the
    // initiator decides and tells the peer in the next ping (byte 0: stop; byte 1: scale up).
    auto* const says = ping.data_ptr<uint8_t>();
    says[1] = initiator && scale == 1 && std::max(out[1], in[1]) < kFastLinkS ? 1 : 0;
    says[0] = initiator && says[1] == 0 && metrics::since(start) > kLongEnoughS ? 1 : 0;
    exchange(ping, ping_tag, ping, ping_tag);
    if (says[1] != 0) {
      scale = kFastScale;
      data[0] = at::zeros({scale * kSmallBytes}, at::kByte);
      data[1] = at::zeros({scale * kLargeBytes}, at::kByte);
      out[0] = out[1] = in[0] = in[1] = 1e30;
      says[1] = 0;
      continue;
    }
    if (says[0] != 0) break;
  }
  if (!initiator) return {};
  return {rate_of(out, scale), rate_of(in, scale), rtt / 2};
}

double probe_latency(Group& g, int peer, bool initiator, int ping_tag) {
  at::Tensor ping = at::zeros({8}, at::kByte);
  double rtt = 1e30;
  for (int i = 0; i < 3; ++i)
    rtt = std::min(rtt, exchange(g, peer, initiator, ping, ping_tag, ping, ping_tag));
  return rtt / 2;
}

}  // namespace dtrain::comm
