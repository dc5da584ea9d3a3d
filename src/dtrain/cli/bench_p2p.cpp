// `dtrain bench p2p`: osu-style point-to-point latency and bandwidth between ranks 0 and 1.
#include <ATen/ATen.h>

#include <chrono>
#include <iostream>
#include <map>
#include <memory>

#include "dtrain/base/device.h"
#include "dtrain/cli/commands.h"
#include "dtrain/cli/common.h"
#include "dtrain/comm/group.h"
#include "dtrain/comm/link_probe.h"
#include "dtrain/comm/tags.h"
#include "dtrain/metrics/keys.h"
#include "dtrain/metrics/memory.h"
#include "dtrain/metrics/rows.h"
#include "dtrain/metrics/timer.h"

namespace dtrain::cli {

namespace key = metrics::key;
namespace {

struct P2pOptions {
  RankFlags rank;
  std::string sizes = "1:1G";
  double factor = 4;
  int iters = 20;
  int warmup = 2;
  int window = 16;
  std::string wire_check = "job";  // job (the job's setting), on, off, or both
  c10::Device device{c10::kCPU};
  Output output;
};

const comm::TagLayout kP2pTags(comm::TagSpace::kBenchmark, {{"p2p", 8}});
const int kDataTag = kP2pTags.make({0});
const int kAckTag = kP2pTags.make({1});
constexpr int64_t kMaxBytesPerMeasurement = int64_t{2} << 30;

// One-way latency: half of a ping-pong round trip, averaged. On a GPU each round trip ends
// when the device has the message (NCCL's wait() only orders the stream).
double latency_us(comm::Group& g, at::Tensor& buf, int iters, int warmup) {
  const int peer = 1 - g.rank();
  double total = 0;
  for (int i = 0; i < warmup + iters; ++i) {
    const auto t0 = metrics::Clock::now();
    if (g.rank() == 0) {
      g.send(buf, peer, kDataTag);
      g.recv(buf, peer, kDataTag);
    } else {
      g.recv(buf, peer, kDataTag);
      synchronize(buf.device());
      g.send(buf, peer, kDataTag);
    }
    synchronize(buf.device());
    if (i >= warmup) total += metrics::since(t0);
  }
  return total / iters / 2 * 1e6;
}

// Bandwidth: rank 0 keeps `window` messages in flight, rank 1 acknowledges each window.
// Each message in flight has a buffer of its own (the wire check reads it on receipt).
double bandwidth_gbps(comm::Group& g, std::vector<at::Tensor>& bufs, int window, int iters,
                      int warmup) {
  const int peer = 1 - g.rank();
  auto ack = at::zeros({1}, at::kInt);
  double total = 0;
  for (int i = 0; i < warmup + iters; ++i) {
    const auto t0 = metrics::Clock::now();
    std::vector<comm::Request> reqs;
    for (int w = 0; w < window; ++w) {
      at::Tensor& buf = bufs[static_cast<size_t>(w) % bufs.size()];
      reqs.push_back(g.rank() == 0 ? g.isend(buf, peer, kDataTag) : g.irecv(buf, peer, kDataTag));
    }
    for (auto& r : reqs)
      r.wait();
    synchronize(bufs[0].device());  // the window has crossed, not just been queued
    if (g.rank() == 0) {
      g.recv(ack, peer, kAckTag);
    } else {
      g.send(ack, peer, kAckTag);
    }
    if (i >= warmup) total += metrics::since(t0);
  }
  return static_cast<double>(bufs[0].numel()) * window * iters / total / 1e9;
}

// After the timing, one message of a known pattern from rank 0, which rank 1 checks and
// answers with the count of bytes that differ (the `wrong` column, as bench collective's):
// every path, NCCL's and the host-staged one included, is shown to deliver the bytes.
int64_t wrong_bytes(comm::Group& g, at::Tensor& buf) {
  const int peer = 1 - g.rank();
  const int64_t bytes = buf.numel();
  const at::Tensor pattern = at::arange(251, at::TensorOptions().dtype(at::kByte))
                                 .repeat({(bytes + 250) / 251})
                                 .narrow(0, 0, bytes)
                                 .to(buf.device());
  at::Tensor wrong = at::zeros({1}, at::kLong);
  if (g.rank() == 0) {
    buf.copy_(pattern);
    g.send(buf, peer, kDataTag);
    g.recv(wrong, peer, kAckTag);
  } else {
    buf.zero_();
    g.recv(buf, peer, kDataTag);
    wrong[0] = buf.ne(pattern).sum().item<int64_t>();  // waits for the device
    g.send(wrong, peer, kAckTag);
  }
  return wrong.item<int64_t>();
}

// The wire-check settings to measure, in order: "both" alternates off and on twice, so
// the two are measured side by side under the same noise. NCCL's messages have none.
std::vector<bool> wire_check_runs(const std::string& mode, bool job_setting, bool nccl) {
  if (nccl) return {false};
  if (mode == "both") return {false, true, false, true};
  if (mode == "on") return {true};
  if (mode == "off") return {false};
  return {job_setting};
}

struct Measurement {
  double latency_us = 0, bandwidth_gbps = 0;
  int64_t wrong = 0;
};

std::vector<metrics::Row> p2p_rank(const P2pOptions& o, comm::Group& g) {
  const auto sizes = parse_sizes(o.sizes, o.factor);
  if (g.size() < 2) throw std::invalid_argument("bench p2p needs at least 2 ranks (-n 2)");
  std::vector<metrics::Row> rows;
  const bool job_check = g.wire_check();
  if (g.round_trip(g.rank() == 0 ? 1 : 0) < 0) comm::measure_round_trips(g);
  for (const int64_t bytes : sizes) {
    // Bounded work per size: big messages get fewer iterations and a smaller window.
    const int window = static_cast<int>(std::max<int64_t>(
        1, std::min<int64_t>(o.window, kMaxBytesPerMeasurement / 8 / std::max<int64_t>(1, bytes))));
    const int iters = static_cast<int>(std::max<int64_t>(
        2, std::min<int64_t>(o.iters,
                             kMaxBytesPerMeasurement / std::max<int64_t>(1, bytes * window))));
    // Best of the runs of each setting: the least disturbed measurement.
    std::map<bool, Measurement> best;
    std::vector<at::Tensor> bufs;
    if (g.rank() < 2) {
      for (int w = 0; w < (g.rank() == 0 ? 1 : window); ++w)
        bufs.push_back(at::zeros({bytes}, at::TensorOptions().dtype(at::kByte).device(o.device)));
    }
    // Decided alike on every rank (each has a GPU of its own or none), so all run the same
    // number of rounds and barriers.
    const bool nccl = g.reduces_on_device(at::empty({0}, at::TensorOptions().device(o.device)));
    const std::string path = nccl ? "nccl" : o.device.is_cpu() ? "gloo" : "gloo staged";
    for (const bool check : wire_check_runs(o.wire_check, job_check, nccl)) {
      g.barrier();
      g.set_wire_check(check);  // every rank switches between the same two barriers
      Measurement m;
      if (g.rank() < 2) {
        m.latency_us = latency_us(g, bufs[0], iters, o.warmup);
        m.bandwidth_gbps = bandwidth_gbps(g, bufs, window, iters, o.warmup);
        m.wrong = wrong_bytes(g, bufs[0]);
      }
      g.set_wire_check(job_check);
      auto [it, first] = best.emplace(check, m);
      if (!first) {
        it->second.latency_us = std::min(it->second.latency_us, m.latency_us);
        it->second.bandwidth_gbps = std::max(it->second.bandwidth_gbps, m.bandwidth_gbps);
        it->second.wrong += m.wrong;
      }
    }
    g.barrier();
    if (g.rank() != 0) continue;
    for (const auto& [check, m] : best) {
      metrics::Row row;
      row[key::kBench] = "p2p";
      row[key::kWorld] = g.size();
      row[key::kBytes] = bytes;
      row[key::kDevice] = to_string(o.device);
      row[key::kPath] = path;
      row[key::kWireCheck] = nccl ? "n/a" : check ? "on" : "off";
      row[key::kLatencyUs] = m.latency_us;
      row[key::kBandwidthGbps] = m.bandwidth_gbps;
      row[key::kWrong] = m.wrong;
      row[key::kStreams] = bytes >= comm::Group::kStripeMinBytes ? g.streams(1) : 1;
      row[key::kRttMs] = g.round_trip(1) * 1e3;
      row[key::kWindow] = window;
      row[key::kIters] = iters;
      row[key::kPeakRssBytes] = metrics::peak_rss_bytes();
      std::cerr << "bench p2p: " << metrics::human_bytes(static_cast<double>(bytes)) << " (" << path
                << ", wire check "
                << (nccl    ? "n/a"
                    : check ? "on"
                            : "off")
                << "): latency " << m.latency_us << " us, bandwidth " << m.bandwidth_gbps
                << " GB/s, #wrong " << m.wrong << std::endl;
      rows.push_back(row);
    }
  }
  return rows;
}

std::vector<metrics::Column> p2p_columns() {
  return {{key::kBytes, "size(B)"},
          {key::kDevice, "device"},
          {key::kPath, "path"},
          {key::kStreams, "streams"},
          {key::kRttMs, "rtt(ms)", 2},
          {key::kWireCheck, "check"},
          {key::kLatencyUs, "latency(us)", 2},
          {key::kBandwidthGbps, "bandwidth(GB/s)", 3},
          {key::kWrong, "#wrong"},
          {key::kWindow, "window"},
          {key::kIters, "iters"},
          {key::kPeakRssBytes, "peakRSS(B)"}};
}

}  // namespace

void register_bench_p2p(CLI::App& bench, int& exit_code) {
  auto o = std::make_shared<P2pOptions>();
  CLI::App* sub = bench.add_subcommand(
      "p2p",
      "point-to-point between ranks 0 and 1: one-way latency (half a ping-pong) and "
      "bandwidth (a window of messages in flight, then an acknowledgement)");
  add_rank_flags(sub, o->rank, /*allow_list=*/false);
  sub->add_option("--sizes", o->sizes, "message sizes: MIN:MAX (times --factor), or a list")
      ->capture_default_str();
  sub->add_option("--factor", o->factor, "size multiplier for MIN:MAX")->capture_default_str();
  sub->add_option("--iters", o->iters, "timed iterations per size (fewer for large messages)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  sub->add_option("--warmup", o->warmup, "untimed iterations")->capture_default_str();
  sub->add_option("--window", o->window, "messages in flight for bandwidth")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  sub->add_option("--wire-check", o->wire_check,
                  "message checksums while measuring: job (DTRAIN_WIRE_CHECK, on by default), "
                  "on, off, or both (alternating off/on twice per size: their cost side by side)")
      ->check(CLI::IsMember({"job", "on", "off", "both"}))
      ->capture_default_str();
  add_typed_option(sub, "--device", o->device, parse_device,
                   "where the buffers live: cpu, cuda or cuda:N (cuda: GPU LOCAL_RANK); CUDA "
                   "buffers go by NCCL (--backend, one GPU per rank; no wire check) or through "
                   "host memory and Gloo (times include the copies)",
                   "cpu");
  add_output_flags(sub, o->output);
  sub->callback([o, &exit_code] {
    parse_sizes(o->sizes, o->factor);
    const auto worlds = world_sizes(o->rank);
    if (worlds.size() > 1) throw std::invalid_argument("bench p2p takes a single -n");
    decide_backend(o->rank, o->device, worlds.empty() ? 1 : worlds[0]);
    Output output = o->output;
    output.columns = p2p_columns();
    exit_code = run_ranked(
        o->rank, worlds, output, [&](comm::Group& g) { return p2p_rank(*o, g); }, o->device);
  });
}

}  // namespace dtrain::cli
