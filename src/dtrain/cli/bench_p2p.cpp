// `dtrain bench p2p`: osu-style point-to-point latency and bandwidth between ranks 0 and 1.
#include <ATen/ATen.h>

#include <chrono>
#include <iostream>
#include <map>
#include <memory>

#include "dtrain/cli/commands.h"
#include "dtrain/cli/common.h"
#include "dtrain/comm/group.h"
#include "dtrain/comm/tags.h"
#include "dtrain/metrics/keys.h"
#include "dtrain/metrics/memory.h"
#include "dtrain/metrics/report.h"
#include "dtrain/metrics/timer.h"

namespace dtrain::cli {
namespace {

struct Options {
  RankFlags rank;
  std::string sizes = "1:1G";
  double factor = 4;
  int iters = 20;
  int warmup = 2;
  int window = 16;
  std::string wire_check = "job";  // job (the job's setting), on, off, or both
  Output output;
};

const comm::TagLayout kP2pTags(comm::TagSpace::kBenchmark, {{"p2p", 8}});
const int kDataTag = kP2pTags.make({0});
const int kAckTag = kP2pTags.make({1});
constexpr int64_t kMaxBytesPerMeasurement = int64_t{2} << 30;

// One-way latency: half of a ping-pong round trip, averaged.
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
      g.send(buf, peer, kDataTag);
    }
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
    if (g.rank() == 0) {
      g.recv(ack, peer, kAckTag);
    } else {
      g.send(ack, peer, kAckTag);
    }
    if (i >= warmup) total += metrics::since(t0);
  }
  return static_cast<double>(bufs[0].numel()) * window * iters / total / 1e9;
}

// The wire-check settings to measure, in order: "both" alternates off and on twice, so
// the two are measured side by side under the same noise.
std::vector<bool> wire_check_runs(const std::string& mode, bool job_setting) {
  if (mode == "both") return {false, true, false, true};
  if (mode == "on") return {true};
  if (mode == "off") return {false};
  return {job_setting};
}

struct Measurement {
  double latency_us = 0, bandwidth_gbps = 0;
};

std::vector<metrics::Row> run_rank(const Options& o, comm::Group& g) {
  const auto sizes = parse_sizes(o.sizes, o.factor);
  if (g.size() < 2) throw std::invalid_argument("bench p2p needs at least 2 ranks (-n 2)");
  std::vector<metrics::Row> rows;
  const bool job_check = g.wire_check();
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
        bufs.push_back(at::zeros({bytes}, at::kByte));
    }
    for (const bool check : wire_check_runs(o.wire_check, job_check)) {
      g.barrier();
      g.set_wire_check(check);  // every rank switches between the same two barriers
      Measurement m;
      if (g.rank() < 2) {
        m.latency_us = latency_us(g, bufs[0], iters, o.warmup);
        m.bandwidth_gbps = bandwidth_gbps(g, bufs, window, iters, o.warmup);
      }
      g.set_wire_check(job_check);
      auto [it, first] = best.emplace(check, m);
      if (!first) {
        it->second.latency_us = std::min(it->second.latency_us, m.latency_us);
        it->second.bandwidth_gbps = std::max(it->second.bandwidth_gbps, m.bandwidth_gbps);
      }
    }
    g.barrier();
    if (g.rank() != 0) continue;
    for (const auto& [check, m] : best) {
      metrics::Row row;
      row["bench"] = "p2p";
      row["world"] = g.size();
      row[metrics::key::kBytes] = bytes;
      row[metrics::key::kWireCheck] = check ? "on" : "off";
      row[metrics::key::kLatencyUs] = m.latency_us;
      row[metrics::key::kBandwidthGbps] = m.bandwidth_gbps;
      row["window"] = window;
      row["iters"] = iters;
      row["peak_rss_bytes"] = metrics::peak_rss_bytes();
      std::cerr << "bench p2p: " << metrics::human_bytes(static_cast<double>(bytes))
                << " (wire check " << (check ? "on" : "off") << "): latency " << m.latency_us
                << " us, bandwidth " << m.bandwidth_gbps << " GB/s" << std::endl;
      rows.push_back(row);
    }
  }
  return rows;
}

std::vector<metrics::Column> columns() {
  return {{metrics::key::kBytes, "size(B)"},
          {metrics::key::kWireCheck, "check"},
          {metrics::key::kLatencyUs, "latency(us)", 2},
          {metrics::key::kBandwidthGbps, "bandwidth(GB/s)", 3},
          {"window", "window"},
          {"iters", "iters"},
          {"peak_rss_bytes", "peakRSS(B)"}};
}

}  // namespace

void register_bench_p2p(CLI::App& bench, int& exit_code) {
  auto o = std::make_shared<Options>();
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
  add_output_flags(sub, o->output);
  sub->callback([o, &exit_code] {
    parse_sizes(o->sizes, o->factor);
    const auto worlds = world_sizes(o->rank);
    if (worlds.size() > 1) throw std::invalid_argument("bench p2p takes a single -n");
    Output output = o->output;
    output.columns = columns();
    exit_code =
        run_ranked(o->rank, worlds, output, [&](comm::Group& g) { return run_rank(*o, g); });
  });
}

}  // namespace dtrain::cli
