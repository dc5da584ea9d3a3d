#include "dtrain/comm/trace_gather.h"

#include <ATen/ATen.h>

#include <limits>
#include <stdexcept>

#include "dtrain/comm/group.h"
#include "dtrain/comm/tags.h"
#include "dtrain/metrics/trace.h"

namespace dtrain::comm {
namespace {

constexpr int64_t kMaxTraceBytes = int64_t{1} << 31;

int64_t now_ns() {
  return metrics::trace::to_ns(metrics::Clock::now());
}

}  // namespace

ClockSync synchronize_clocks(Group& group, int rounds) {
  ClockSync sync;
  const int tag = trace_tag();
  at::Tensor ping = at::zeros({1}, at::kLong);
  at::Tensor pong = at::zeros({2}, at::kLong);  // origin, rank 0's now
  if (group.rank() == 0) {
    sync.origin_ns = now_ns();
    for (int peer = 1; peer < group.size(); ++peer) {
      for (int i = 0; i < rounds; ++i) {
        group.recv(ping, peer, tag);
        pong[0] = sync.origin_ns;
        pong[1] = now_ns();
        group.send(pong, peer, tag);
      }
    }
    return sync;
  }
  sync.rtt_ns = std::numeric_limits<int64_t>::max();
  for (int i = 0; i < rounds; ++i) {
    const int64_t sent = now_ns();
    group.send(ping, 0, tag);
    group.recv(pong, 0, tag);
    const int64_t received = now_ns();
    if (received - sent < sync.rtt_ns) {
      sync.rtt_ns = received - sent;
      sync.origin_ns = pong[0].item<int64_t>();
      sync.offset_ns = pong[1].item<int64_t>() - (sent + (received - sent) / 2);
    }
  }
  return sync;
}

nlohmann::json gather_trace_events(Group& group, const ClockSync& sync,
                                   nlohmann::json& other_data) {
  const int tag = trace_tag();
  const nlohmann::json mine = metrics::trace::to_events(metrics::trace::collect(), group.rank(),
                                                        sync.origin_ns, sync.offset_ns);
  if (group.rank() != 0) {
    const std::string text =
        nlohmann::json{{"events", mine}, {"rtt_ns", sync.rtt_ns}, {"offset_ns", sync.offset_ns}}
            .dump();
    const std::vector<uint8_t> bytes(text.begin(), text.end());
    group.isend_bytes(bytes, 0, tag).wait();
    return nlohmann::json::array();
  }
  nlohmann::json all = mine;
  nlohmann::json offsets = nlohmann::json::array({{{"rank", 0}, {"offset_us", 0}, {"rtt_us", 0}}});
  for (int peer = 1; peer < group.size(); ++peer) {
    const auto bytes = group.recv_bytes(peer, tag, kMaxTraceBytes);
    const auto part = nlohmann::json::parse(bytes.begin(), bytes.end(), nullptr, false);
    if (part.is_discarded() || !part.contains("events") || !part["events"].is_array())
      throw std::runtime_error("corrupt trace events from rank " + std::to_string(peer));
    for (const auto& e : part["events"])
      all.push_back(e);
    offsets.push_back({{"rank", peer},
                       {"offset_us", part.value("offset_ns", int64_t{0}) / 1e3},
                       {"rtt_us", part.value("rtt_ns", int64_t{0}) / 1e3}});
  }
  other_data["clock_sync"] = offsets;
  return all;
}

}  // namespace dtrain::comm
