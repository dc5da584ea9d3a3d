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

double rate_of(const double (&seconds)[2]) {
  return static_cast<double>(kLargeBytes - kSmallBytes) / std::max(seconds[1] - seconds[0], 1e-7);
}

}  // namespace

LinkProbe probe_link(Group& g, int peer, bool initiator, int ping_tag, int data_tag) {
  at::Tensor ping = at::zeros({8}, at::kByte);
  at::Tensor data[2] = {at::zeros({kSmallBytes}, at::kByte), at::zeros({kLargeBytes}, at::kByte)};
  // The initiator sends `out` and waits for `in`; the peer mirrors: receives, then answers.
  auto exchange = [&](at::Tensor& out, int out_tag, at::Tensor& in, int in_tag) {
    const auto t0 = metrics::Clock::now();
    if (initiator) {
      g.send(out, peer, out_tag);
      g.recv(in, peer, in_tag);
    } else {
      g.recv(out, peer, out_tag);
      g.send(in, peer, in_tag);
    }
    return metrics::since(t0);
  };
  double rtt = 1e30, out[2] = {1e30, 1e30}, in[2] = {1e30, 1e30};
  const auto start = metrics::Clock::now();
  for (int round = 0; round < kRounds; ++round) {
    rtt = std::min(rtt, exchange(ping, ping_tag, ping, ping_tag));
    for (int size = 0; size < 2; ++size) {
      out[size] = std::min(out[size], exchange(data[size], data_tag, ping, ping_tag));
      in[size] = std::min(in[size], exchange(ping, ping_tag, data[size], data_tag));
    }
    // Both ends see nearly the same times, but must agree on whether to go on: the
    // initiator decides and tells the peer with the first byte of the next ping.
    ping.data_ptr<uint8_t>()[0] = initiator && metrics::since(start) > kLongEnoughS ? 1 : 0;
    exchange(ping, ping_tag, ping, ping_tag);
    if (ping.data_ptr<uint8_t>()[0] != 0) break;
  }
  if (!initiator) return {};
  return {rate_of(out), rate_of(in), rtt / 2};
}

double probe_latency(Group& g, int peer, bool initiator, int ping_tag) {
  at::Tensor ping = at::zeros({8}, at::kByte);
  double rtt = 1e30;
  for (int i = 0; i < 3; ++i) {
    const auto t0 = metrics::Clock::now();
    if (initiator) {
      g.send(ping, peer, ping_tag);
      g.recv(ping, peer, ping_tag);
    } else {
      g.recv(ping, peer, ping_tag);
      g.send(ping, peer, ping_tag);
    }
    rtt = std::min(rtt, metrics::since(t0));
  }
  return rtt / 2;
}

}  // namespace dtrain::comm
