// `dtrain bench collective`: nccl-tests-style timing and checking of the collectives.
#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <memory>

#include "dtrain/base/device.h"
#include "dtrain/cli/commands.h"
#include "dtrain/cli/common.h"
#include "dtrain/cli/tracing.h"
#include "dtrain/comm/allreduce.h"
#include "dtrain/comm/collectives.h"
#include "dtrain/comm/exact_oracle.h"
#include "dtrain/comm/group.h"
#include "dtrain/metrics/bandwidth.h"
#include "dtrain/metrics/keys.h"
#include "dtrain/metrics/memory.h"
#include "dtrain/metrics/rows.h"
#include "dtrain/metrics/timer.h"
#include "dtrain/metrics/trace.h"

namespace dtrain::cli {

namespace key = metrics::key;
namespace {

struct Options {
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
  c10::Device device{c10::kCPU};
};

using Op = metrics::CollectiveKind;

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
      return {"ring", "butterfly", "direct", "native", "auto"};
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
    case Op::kAllReduce:
      return "ring,butterfly,direct,native";
    case Op::kBroadcast:
      return "tree,scatter,native";
    default:
      return "ring";
  }
}

at::Tensor pattern(int rank, int64_t begin, int64_t count, comm::ReduceOp op) {
  return comm::exact_input(rank, begin, count, op);
}

// The exact expected result for elements [begin, begin+count), in float64.
at::Tensor expected(Op op, comm::ReduceOp rop, int p, int64_t total, int64_t begin, int64_t count,
                    at::ScalarType dtype) {
  if (op == Op::kBroadcast) return pattern(0, begin, count, rop).to(at::kDouble);
  if (op == Op::kAllGather) {
    at::Tensor out = at::empty({count}, at::kDouble);
    int64_t block_begin = 0;
    for (int j = 0; j < p; ++j) {
      const int64_t n = comm::block_count(total, p, j);
      const int64_t lo = std::max(begin, block_begin),
                    hi = std::min(begin + count, block_begin + n);
      if (lo < hi) out.narrow(0, lo - begin, hi - lo).copy_(pattern(j, lo, hi - lo, rop));
      block_begin += n;
    }
    return out;
  }
  return comm::exact_reduction(p, begin, count, rop, dtype);
}

struct Buffers {
  at::Tensor input;         // pristine copy
  at::Tensor work;          // what the collective runs on
  at::Tensor output;        // reduce_scatter's block
  int64_t check_begin = 0;  // global index of work/output's first element
};

// pattern(rank, begin, count) written straight into a tensor of `dtype`, a chunk at a
// time: a 1 GiB buffer must not need gigabytes of int64 temporaries.
at::Tensor filled(int rank, int64_t begin, int64_t count, comm::ReduceOp rop,
                  at::ScalarType dtype) {
  at::Tensor out = at::empty({count}, dtype);
  constexpr int64_t kChunk = 1 << 22;
  for (int64_t at = 0; at < count; at += kChunk) {
    const int64_t n = std::min(kChunk, count - at);
    out.narrow(0, at, n).copy_(pattern(rank, begin + at, n, rop));
  }
  return out;
}

Buffers make_buffers(Op op, comm::ReduceOp rop, const comm::Group& g, int64_t count,
                     at::ScalarType dtype, const c10::Device& device) {
  Buffers b;
  const int p = g.size(), r = g.rank();
  int64_t my_begin = 0;
  for (int j = 0; j < r; ++j)
    my_begin += comm::block_count(count, p, j);
  const int64_t mine = comm::block_count(count, p, r);
  switch (op) {
    case Op::kAllReduce:
    case Op::kReduceScatter:
      b.input = filled(r, 0, count, rop, dtype);
      break;
    case Op::kBroadcast:
      b.input = r == 0 ? filled(0, 0, count, rop, dtype) : at::zeros({count}, dtype);
      break;
    case Op::kAllGather:
      b.input = filled(r, my_begin, mine, rop, dtype);
      break;
  }
  b.input = b.input.to(device);
  b.work = op == Op::kAllGather ? at::empty({count}, b.input.options()) : b.input.clone();
  if (op == Op::kReduceScatter) {
    b.output = at::empty({mine}, b.input.options());
    b.check_begin = my_begin;
  }
  return b;
}

void run_once(Op op, const std::string& algo, comm::Group& g, Buffers& b, comm::ReduceOp rop,
              int64_t segment_bytes) {
  switch (op) {
    case Op::kAllReduce: {
      comm::AllReduceOptions o;
      o.op = rop;
      o.algorithm = comm::parse_algorithm(algo);
      o.segment_bytes = segment_bytes;
      comm::all_reduce(g, b.work, o);
      return;
    }
    case Op::kBroadcast:
      if (algo == "native") {
        g.native_broadcast(b.work, 0);
      } else {
        comm::broadcast(g, b.work, 0,
                        algo == "tree"      ? comm::BroadcastAlgorithm::kBinomialTree
                        : algo == "scatter" ? comm::BroadcastAlgorithm::kScatterAllGather
                                            : comm::BroadcastAlgorithm::kAuto);
      }
      return;
    case Op::kReduceScatter:
      comm::reduce_scatter(g, b.work, b.output, rop);
      return;
    case Op::kAllGather:
      comm::all_gather(g, b.input, b.work);
      return;
  }
}

void restore(Op op, Buffers& b) {
  if (op != Op::kAllGather) b.work.copy_(b.input);
}

// Compares the result with the exact expectation in chunks (bounded memory for 1 GiB runs).
std::pair<int64_t, double> check(Op op, comm::ReduceOp rop, int p, int64_t total, const Buffers& b,
                                 at::ScalarType dtype) {
  const at::Tensor& result = op == Op::kReduceScatter ? b.output : b.work;
  constexpr int64_t kChunk = 1 << 22;
  int64_t wrong = 0;
  double max_diff = 0;
  for (int64_t at = 0; at < result.numel(); at += kChunk) {
    const int64_t n = std::min(kChunk, result.numel() - at);
    const at::Tensor want = expected(op, rop, p, total, b.check_begin + at, n, dtype);
    const at::Tensor got = result.narrow(0, at, n).to(at::kCPU, at::kDouble);
    const at::Tensor diff = (got - want).abs();
    wrong += diff.ne(0).sum().item<int64_t>();
    max_diff = std::max(max_diff, diff.max().item<double>());
  }
  return {wrong, max_diff};
}

std::vector<metrics::Column> columns() {
  return {{key::kBytes, "size(B)"},
          {key::kCount, "count"},
          {key::kDtype, "type"},
          {key::kDevice, "device"},
          {key::kReduce, "redop"},
          {key::kOp, "op"},
          {key::kAlgo, "algo"},
          {key::kWorld, "ranks"},
          {key::kTimeUs, "time(us)", 1},
          {key::kAlgbwGbps, "algbw(GB/s)", 3},
          {key::kBusbwGbps, "busbw(GB/s)", 3},
          {key::kWrong, "#wrong"},
          {key::kMaxAbsDiff, "maxdiff", 3},
          {key::kPeakRssBytes, "peakRSS(B)"}};
}

std::vector<metrics::Row> run_rank(const Options& o, comm::Group& g) {
  const Op op = parse_op(o.op);
  const auto dtype = parse_dtype(o.dtype);
  const auto rop = comm::parse_reduce_op(o.reduce);
  const auto algos = split_list(o.algos.empty() ? default_algos(op, o.device) : o.algos);
  const auto sizes = parse_sizes(o.sizes, o.factor);
  const int p = g.size();
  const int64_t elem = static_cast<int64_t>(c10::elementSize(dtype));
  std::vector<std::string> span_names;  // alive until the trace is written
  for (const auto& algo : algos)
    span_names.push_back(o.op + " " + algo);
  TraceSession trace(o.trace_path, &g);

  std::vector<metrics::Row> rows;
  for (const int64_t bytes : sizes) {
    const int64_t count = bytes / elem;
    // Algorithms take turns round by round, so drift on a noisy machine hits all alike.
    // One set of buffers serves every algorithm (restored before each run): 1 GiB sizes fit.
    Buffers b = make_buffers(op, rop, g, count, dtype, o.device);
    std::vector<double> total_s(algos.size(), 0.0);
    std::vector<std::pair<int64_t, double>> checks(algos.size(), {-1, -1.0});
    for (size_t a = 0; a < algos.size(); ++a) {
      for (int i = 0; i < o.warmup; ++i) {
        restore(op, b);
        run_once(op, algos[a], g, b, rop, o.segment_bytes);
      }
    }
    for (int round = 0; round < o.rounds; ++round) {
      for (size_t a = 0; a < algos.size(); ++a) {
        for (int i = 0; i < o.iters; ++i) {
          restore(op, b);
          synchronize(o.device);  // the restore's copy is not timed
          const auto t0 = metrics::Clock::now();
          run_once(op, algos[a], g, b, rop, o.segment_bytes);
          synchronize(o.device);  // a GPU collective is timed to its end, not its launch
          total_s[a] += metrics::trace::span_since("collective", span_names[a].c_str(), t0,
                                                   count * elem, "bytes");
        }
        if (o.check && round + 1 == o.rounds) checks[a] = check(op, rop, p, count, b, dtype);
      }
    }
    for (size_t a = 0; a < algos.size(); ++a) {
      const std::string& algo = algos[a];
      const auto [wrong, max_diff] = checks[a];
      // Time: mean over iterations, then max over ranks; memory: max over ranks.
      at::Tensor maxes = at::tensor({total_s[a] / (o.iters * o.rounds) * 1e6, max_diff,
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
      row[key::kAlgbwGbps] = algbw;
      row[key::kBusbwGbps] = algbw * metrics::bus_factor(op, p);
      row[key::kWrong] = o.check ? wrong_total.item<int64_t>() : -1;
      row[key::kMaxAbsDiff] = o.check ? maxes[1].item<double>() : -1.0;
      row[key::kPeakRssBytes] = static_cast<int64_t>(maxes[2].item<double>());
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

int run(const Options& o) {
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
  output.columns = columns();
  return run_ranked(
      o.rank, worlds, output, [&](comm::Group& g) { return run_rank(o, g); }, o.device);
}

}  // namespace

void register_bench_collective(CLI::App& bench, int& exit_code) {
  auto o = std::make_shared<Options>();
  CLI::App* sub = bench.add_subcommand(
      "collective",
      "time and check a collective (nccl-tests style): time = mean over iterations, max over "
      "ranks; algbw = bytes/time; busbw = algbw * 2(p-1)/p (all_reduce), (p-1)/p "
      "(reduce_scatter, all_gather), 1 (broadcast)");
  add_rank_flags(sub, o->rank, /*allow_list=*/true);
  sub->add_option("--op", o->op, "all_reduce, broadcast, reduce_scatter, all_gather")
      ->capture_default_str();
  sub->add_option("--algo", o->algos,
                  "comma list; all_reduce: ring, butterfly, direct, native, auto; broadcast: "
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
  add_output_flags(sub, o->output);
  sub->add_option("--trace", o->trace_path,
                  "write a Chrome trace (JSON) of every rank's timed iterations, clocks aligned "
                  "to rank 0 (with a list of world sizes: of the last)");
  sub->callback([o, &exit_code] { exit_code = run(*o); });
}

}  // namespace dtrain::cli
