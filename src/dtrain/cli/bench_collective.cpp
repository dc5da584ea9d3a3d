// `dtrain bench collective`: nccl-tests-style timing and checking of the collectives.
#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <memory>
#include <numeric>

#include "dtrain/base/device.h"
#include "dtrain/base/median.h"
#include "dtrain/cli/collective_buffers.h"
#include "dtrain/cli/commands.h"
#include "dtrain/cli/common.h"
#include "dtrain/cli/tracing.h"
#include "dtrain/comm/allreduce.h"
#include "dtrain/comm/allreduce_tuner.h"
#include "dtrain/comm/collectives.h"
#include "dtrain/comm/exact_oracle.h"
#include "dtrain/comm/group.h"
#include "dtrain/comm/link_probe.h"
#include "dtrain/comm/world.h"
#include "dtrain/metrics/bandwidth.h"
#include "dtrain/metrics/keys.h"
#include "dtrain/metrics/memory.h"
#include "dtrain/metrics/rows.h"
#include "dtrain/metrics/timer.h"
#include "dtrain/metrics/trace.h"

namespace dtrain::cli {

namespace key = metrics::key;
namespace {

struct CollectiveOptions {
  RankFlags rank;
  std::string op = "all_reduce";
  std::string algos;
  std::string sizes = "4K:64M";
  double factor = 4;
  int warmup = 3;
  int iters = 10;
  int rounds = 1;
  std::string dtype = "float32";
  std::string reduce = "sum";
  Output output;
  bool check = true;
  int64_t segment_bytes = 1024 * 1024;
  std::string trace_path;
  std::string wire_check = "job";  // job (the job's setting), on, off, or both
  std::string settle = "on";     // a barrier and an untimed call a turn: on, auto (long links), off
  std::string openings = "job";  // job (as connect set each link), on, off, or both
  c10::Device device{c10::kCPU};
};

Op parse_op(const std::string& s) {
  if (s == "all_reduce") return Op::kAllReduce;
  if (s == "broadcast") return Op::kBroadcast;
  if (s == "reduce_scatter") return Op::kReduceScatter;
  if (s == "all_gather") return Op::kAllGather;
  throw std::invalid_argument("--op '" + s +
                              "': expected all_reduce, broadcast, reduce_scatter or all_gather");
}

// Buffers on a GPU take the backend's own collectives only (NCCL, or Gloo through host
// memory): dtrain's algorithms move host memory.
std::vector<std::string> valid_algos(Op op, const c10::Device& device) {
  if (device.is_cuda()) {
    if (op == Op::kAllReduce) return {"native", "auto"};
    if (op == Op::kBroadcast) return {"native"};
    return {};
  }
  switch (op) {
    case Op::kAllReduce:
      return split_list(comm::algorithm_names(","));
    case Op::kBroadcast:
      return {"tree", "scatter", "native", "auto"};
    case Op::kReduceScatter:
    case Op::kAllGather:
      return {"ring"};
  }
  return {};
}

std::string default_algos(Op op, const c10::Device& device) {
  if (device.is_cuda()) return "native";
  switch (op) {
    case Op::kAllReduce:  // every concrete one (auto is what they are compared with)
      return comm::algorithm_names(",", /*with_auto=*/false);
    case Op::kBroadcast:
      return "tree,scatter,native";
    default:
      return "ring";
  }
}

std::vector<metrics::Column> collective_columns() {
  return {{key::kBytes, "size(B)"},
          {key::kCount, "count"},
          {key::kDtype, "type"},
          {key::kDevice, "device"},
          {key::kReduce, "redop"},
          {key::kOp, "op"},
          {key::kAlgo, "algo"},
          {key::kWorld, "ranks"},
          {key::kTimeUs, "time(us)", 1},
          {key::kMedianUs, "median(us)", 1},
          {key::kAlgbwGbps, "algbw(GB/s)", 3},
          {key::kBusbwGbps, "busbw(GB/s)", 3},
          {key::kWrong, "#wrong"},
          {key::kMaxAbsDiff, "maxdiff", 3},
          {key::kWireCheck, "check"},
          {key::kChosen, "chosen"},
          {key::kStreams, "streams"},
          {key::kOpenings, "openings"},
          {key::kRttMs, "rtt(ms)", 2},
          {key::kPeakRssBytes, "peakRSS(B)"}};
}

// What takes turns: every algorithm, each with the wire check as --wire-check says and the
// openings as --openings says (both: off and on, side by side in every round).
struct Variant {
  std::string algo;
  bool check;
  bool openings;
};
std::vector<bool> on_off(const std::string& mode, bool job) {
  if (mode == "on" || mode == "off") return {mode == "on"};
  if (mode == "both") return {false, true};
  return {job};
}
std::vector<Variant> variants(const std::vector<std::string>& algos, const CollectiveOptions& o,
                              bool job_check, bool job_openings) {
  std::vector<Variant> out;
  for (const auto& algo : algos)
    for (const bool check : on_off(o.wire_check, job_check))
      for (const bool openings : on_off(o.openings, job_openings))
        out.push_back({algo, check, openings});
  return out;
}

// The links' opening capacities as connect set them, and a switch every rank flips between
// the same two collectives: on gives every link Group::kOpeningBytes, off none, the job's
// setting what connect gave.
struct OpeningSwitch {
  std::vector<int64_t> job;
  bool job_on = false;
  explicit OpeningSwitch(comm::Group& g) {
    for (int peer = 0; peer < g.size(); ++peer) {
      job.push_back(peer == g.rank() ? 0 : g.opening_capacity(peer));
      job_on = job_on || job.back() > 0;
    }
  }
  void set(comm::Group& g, bool on) const {
    for (int peer = 0; peer < g.size(); ++peer)
      if (peer != g.rank())
        g.set_opening_capacity(peer, !on      ? 0
                                     : job_on ? job[static_cast<size_t>(peer)]
                                              : comm::Group::kOpeningBytes);
  }
};

// The median call in microseconds, each call's time the slowest rank's (every rank ran the
// same calls in the same order). Beside the mean (nccl-tests' time): on a busy machine one
// call in a hundred held up by the scheduler moves a small size's mean by tens of percent.
double median_call_us(comm::Group& g, const std::vector<double>& calls_s) {
  if (calls_s.empty()) return 0;
  at::Tensor slowest = at::tensor(calls_s, at::kDouble);
  g.native_all_reduce(slowest, comm::ReduceOp::kMax);
  return median({slowest.data_ptr<double>(), slowest.data_ptr<double>() + slowest.numel()}) * 1e6;
}

std::vector<metrics::Row> collective_rank(const CollectiveOptions& o, comm::Group& g) {
  const Op op = parse_op(o.op);
  const auto dtype = parse_dtype(o.dtype);
  const auto rop = comm::parse_reduce_op(o.reduce);
  const bool job_check = g.wire_check();
  const OpeningSwitch openings(g);
  const auto runs = variants(split_list(o.algos.empty() ? default_algos(op, o.device) : o.algos), o,
                             job_check, openings.job_on);
  const auto sizes = parse_sizes(o.sizes, o.factor);
  const int p = g.size();
  const int64_t elem = static_cast<int64_t>(c10::elementSize(dtype));
  std::vector<std::string> span_names;  // alive until the trace is written
  for (const auto& v : runs)
    span_names.push_back(o.op + " " + v.algo + (v.check == job_check ? "" : " (check flipped)") +
                         (v.openings == openings.job_on ? "" : " (openings flipped)"));
  TraceSession trace(o.trace_path, &g);
  bool measured = true;
  for (int peer = 0; peer < p; ++peer)
    measured = measured && (peer == g.rank() || g.round_trip(peer) >= 0);
  if (!measured) comm::measure_round_trips(g);
  // The longest round trip and the most streams of any link: the same on every rank.
  at::Tensor link = at::tensor({g.longest_round_trip(), 0.0}, at::kDouble);
  for (int peer = 0; peer < p; ++peer)
    if (peer != g.rank())
      link[1] = std::max(link[1].item<double>(), static_cast<double>(g.streams(peer)));
  g.native_all_reduce(link, comm::ReduceOp::kMax);
  const bool long_link = link[0].item<double>() >= comm::kLongRttSeconds;
  const bool settle = o.settle == "on" || (o.settle == "auto" && long_link);

  std::vector<metrics::Row> rows;
  for (const int64_t bytes : sizes) {
    const int64_t count = bytes / elem;
    // Algorithms take turns round by round, so drift on a noisy machine hits all alike.
    // One set of buffers serves every algorithm (restored before each run): 1 GiB sizes fit.
    Buffers b = make_buffers(op, rop, g, count, dtype, o.device);
    std::vector<std::vector<double>> calls_s(runs.size());
    std::vector<std::pair<int64_t, double>> checks(runs.size(), {-1, -1.0});
    // Every rank switches the wire check between the same two collectives (nothing is in
    // flight between them), as both ends of every link must.
    for (size_t a = 0; a < runs.size(); ++a) {
      g.set_wire_check(runs[a].check);
      openings.set(g, runs[a].openings);
      for (int i = 0; i < o.warmup; ++i) {
        restore(op, b);
        run_once(op, runs[a].algo, g, b, rop, o.segment_bytes);
      }
    }
    for (int round = 0; round < o.rounds; ++round) {
      // Each round starts one variant later: none always follows the same other one (on a
      // busy machine what ran just before can slow the next).
      for (size_t turn = 0; turn < runs.size(); ++turn) {
        const size_t a = (turn + static_cast<size_t>(round)) % runs.size();
        g.set_wire_check(runs[a].check);
        openings.set(g, runs[a].openings);
        // Every turn starts from a barrier and one untimed call: the first call after
        // another variant otherwise absorbs what that variant left behind, the ranks' skew
        // (up to a few one-way delays) and connections gone idle long enough for TCP to
        // restart them slowly; the variant after native read 20-26 % slow with 4 ranks 25 ms
        // apart, and on loopback auto's row 0.7-0.85x the row of the algorithm it ran
        // (docs/results.md).
        if (settle) {
          g.barrier();
          restore(op, b);
          run_once(op, runs[a].algo, g, b, rop, o.segment_bytes);
        }
        for (int i = 0; i < o.iters; ++i) {
          restore(op, b);
          synchronize(o.device);  // the restore's copy is not timed
          const auto t0 = metrics::Clock::now();
          run_once(op, runs[a].algo, g, b, rop, o.segment_bytes);
          synchronize(o.device);  // a GPU collective is timed to its end, not its launch
          calls_s[a].push_back(metrics::trace::span_since("collective", span_names[a].c_str(), t0,
                                                          count * elem, "bytes"));
        }
        if (o.check && round + 1 == o.rounds) checks[a] = check(op, rop, p, count, b, dtype);
      }
    }
    g.set_wire_check(job_check);
    openings.set(g, openings.job_on);
    for (size_t a = 0; a < runs.size(); ++a) {
      const std::string& algo = runs[a].algo;
      const auto [wrong, max_diff] = checks[a];
      // Time: mean over iterations, then max over ranks; memory: max over ranks.
      const double total_s = std::accumulate(calls_s[a].begin(), calls_s[a].end(), 0.0);
      at::Tensor maxes = at::tensor({total_s / (o.iters * o.rounds) * 1e6, max_diff,
                                     static_cast<double>(metrics::peak_rss_bytes())},
                                    at::kDouble);
      g.native_all_reduce(maxes, comm::ReduceOp::kMax);
      at::Tensor wrong_total = at::tensor({wrong}, at::kLong);
      g.native_all_reduce(wrong_total, comm::ReduceOp::kSum);
      const double time_us = maxes[0].item<double>();
      const int64_t moved = count * elem;
      const double algbw = metrics::algbw_gbps(static_cast<double>(moved), time_us * 1e-6);
      metrics::Row row;
      row[key::kBench] = "collective";
      row[key::kOp] = o.op;
      row[key::kAlgo] = algo;
      row[key::kReduce] = o.reduce;
      row[key::kWorld] = p;
      row[key::kBytes] = moved;
      row[key::kCount] = count;
      row[key::kDtype] = dtype_name(dtype);
      row[key::kDevice] = to_string(o.device);
      row[key::kTimeUs] = time_us;
      row[key::kMedianUs] = median_call_us(g, calls_s[a]);
      row[key::kAlgbwGbps] = algbw;
      row[key::kBusbwGbps] = algbw * metrics::bus_factor(op, p);
      row[key::kWrong] = o.check ? wrong_total.item<int64_t>() : -1;
      row[key::kMaxAbsDiff] = o.check ? maxes[1].item<double>() : -1.0;
      row[key::kPeakRssBytes] = static_cast<int64_t>(maxes[2].item<double>());
      row[key::kWireCheck] = o.device.is_cuda() ? "n/a" : runs[a].check ? "on" : "off";
      row[key::kStreams] = static_cast<int>(link[1].item<double>());
      row[key::kOpenings] = runs[a].openings ? "on" : "off";
      row[key::kRttMs] = link[0].item<double>() * 1e3;
      if (algo == "auto" && op == Op::kAllReduce && !o.device.is_cuda()) {
        const auto* chosen = g.all_reduce_tuner().choice(
            comm::collective_tag(comm::CollectiveChannel::kAllReduce), dtype, rop, moved);
        if (chosen != nullptr) {
          row[key::kChosen] = comm::to_string(chosen->algorithm);
          if (g.rank() == 0) {
            std::cerr << "bench collective: auto chose " << comm::to_string(chosen->algorithm)
                      << " for " << metrics::human_bytes(static_cast<double>(moved)) << " (";
            for (const auto& [candidate, seconds] : chosen->candidates)
              std::cerr << comm::to_string(candidate) << " " << seconds * 1e6 << " us; ";
            std::cerr << chosen->calibrations << " calibration(s)"
                      << (chosen->from_cache && chosen->calibrations == 0
                              ? ", from an earlier run (DTRAIN_AUTO_CACHE)"
                              : "")
                      << ")" << std::endl;
          }
        }
      }
      if (g.rank() == 0) {
        std::cerr << "bench collective: " << o.op << " " << algo << " world " << p << " "
                  << metrics::human_bytes(static_cast<double>(moved)) << ": " << time_us
                  << " us, busbw " << row[key::kBusbwGbps].get<double>() << " GB/s, #wrong "
                  << row[key::kWrong] << std::endl;
      }
      rows.push_back(row);
    }
  }
  trace.finish();
  return rows;
}

int run_collective(const CollectiveOptions& o) {
  // Validate everything up front, before any rank starts.
  const Op op = parse_op(o.op);
  if (o.device.is_cuda() && valid_algos(op, o.device).empty())
    throw std::invalid_argument("--op " + o.op +
                                " runs on CPU buffers (on a GPU: all_reduce or broadcast)");
  for (const auto& a : split_list(o.algos.empty() ? default_algos(op, o.device) : o.algos)) {
    const auto valid = valid_algos(op, o.device);
    if (std::find(valid.begin(), valid.end(), a) == valid.end()) {
      std::string list;
      for (const auto& v : valid)
        list += (list.empty() ? "" : ", ") + v;
      throw std::invalid_argument("--algo '" + a + "' does not apply to " + o.op + " on " +
                                  to_string(o.device) + " buffers (choose " + list + ")");
    }
  }
  const auto worlds = world_sizes(o.rank);
  decide_backend(o.rank, o.device,
                 worlds.empty() ? 1 : *std::max_element(worlds.begin(), worlds.end()));
  parse_dtype(o.dtype);
  comm::parse_reduce_op(o.reduce);
  parse_sizes(o.sizes, o.factor);
  Output output = o.output;
  output.columns = collective_columns();
  return run_ranked(
      o.rank, worlds, output, [&](comm::Group& g) { return collective_rank(o, g); }, o.device);
}

}  // namespace

void register_bench_collective(CLI::App& bench, int& exit_code) {
  auto o = std::make_shared<CollectiveOptions>();
  CLI::App* sub = bench.add_subcommand(
      "collective",
      "time and check a collective (nccl-tests style): time = mean over iterations, max over "
      "ranks; median = the median call, each call the slowest rank's; algbw = bytes/time; busbw = "
      "algbw * 2(p-1)/p (all_reduce), (p-1)/p "
      "(reduce_scatter, all_gather), 1 (broadcast)");
  add_rank_flags(sub, o->rank, /*allow_list=*/true);
  sub->add_option("--op", o->op, "all_reduce, broadcast, reduce_scatter, all_gather")
      ->capture_default_str();
  sub->add_option("--algo", o->algos,
                  "comma list; all_reduce: " + comm::algorithm_names() +
                      "; broadcast: "
                      "tree, scatter, native, auto; reduce_scatter/all_gather: ring "
                      "(default: all of them but auto)");
  sub->add_option("--sizes", o->sizes, "bytes per rank buffer: MIN:MAX (times --factor), or a list")
      ->capture_default_str();
  sub->add_option("--factor", o->factor, "size multiplier for MIN:MAX")->capture_default_str();
  sub->add_option("--warmup", o->warmup, "untimed iterations per size")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  sub->add_option("--iters", o->iters, "timed iterations per size")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  sub->add_option("--rounds", o->rounds,
                  "repeat the algorithm list this many times, taking turns (--iters each turn)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  sub->add_option("--dtype", o->dtype, "float32, float64, float16, bfloat16, int32, int64")
      ->capture_default_str();
  sub->add_option("--reduce", o->reduce, "sum, avg, min, max, product")->capture_default_str();
  sub->add_option("--segment", o->segment_bytes, "ring segment size in bytes")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  add_typed_option(sub, "--device", o->device, parse_device,
                   "where the buffers live: cpu, cuda or cuda:N (cuda: GPU LOCAL_RANK); on a GPU "
                   "the algorithm is native: NCCL's (--backend nccl, one GPU per rank) or Gloo's "
                   "through host memory",
                   "cpu");
  sub->add_flag("--no-check{false}", o->check, "skip the exact result check");
  sub->add_option("--wire-check", o->wire_check,
                  "job (the job's setting), on, off, or both: each algorithm with the message "
                  "checksums off and on, taking turns in every round")
      ->check(CLI::IsMember({"job", "on", "off", "both"}))
      ->capture_default_str();
  sub->add_option("--settle", o->settle,
                  "start every turn from a barrier and one untimed call: on, auto (only on "
                  "links with a round trip of 5 ms or more), off")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  sub->add_option("--openings", o->openings,
                  "job (as connect set each link: on where the round trip is 5 ms or more), on, "
                  "off, or both: each algorithm with the collective's first bytes sent to "
                  "receives posted before the call, and without, taking turns in every round")
      ->check(CLI::IsMember({"job", "on", "off", "both"}))
      ->capture_default_str();
  add_output_flags(sub, o->output);
  sub->add_option("--trace", o->trace_path,
                  "write a Chrome trace (JSON) of every rank's timed iterations, clocks aligned "
                  "to rank 0 (with a list of world sizes: of the last)");
  sub->callback([o, &exit_code] { exit_code = run_collective(*o); });
}

}  // namespace dtrain::cli
