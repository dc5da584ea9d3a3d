// `dtrain bench checksum`: what the wire check (comm/group.h, Integrity) costs on this CPU,
// per CRC-32C kernel (base/crc32c.h) and size: the plain CRC, the CRC fused with a copy (the
// inline framing's) and fused with a float32 sum (the ring's reduce step, input and result
// both checksummed), each beside the same pass without a CRC (memcpy, the sum alone). Small
// sizes measure data in cache, sizes beyond the last-level cache data from memory.
#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <iostream>
#include <memory>
#include <vector>

#include "dtrain/base/crc32c.h"
#include "dtrain/base/median.h"
#include "dtrain/cli/commands.h"
#include "dtrain/cli/common.h"
#include "dtrain/comm/fused_reduce.h"
#include "dtrain/comm/reduce_op.h"
#include "dtrain/metrics/keys.h"
#include "dtrain/metrics/rows.h"

namespace dtrain::cli {

namespace key = metrics::key;
namespace {

struct ChecksumOptions {
  std::string sizes = "256K,64M";
  int reps = 21;
  Output output;
};

// Median seconds of one pass over `bytes`, each sample enough passes for about 4 MiB.
double median_pass_s(int64_t bytes, int reps, const std::function<void()>& pass) {
  const int64_t inner = std::max<int64_t>(1, (int64_t{4} << 20) / std::max<int64_t>(1, bytes));
  pass();  // warm-up: pages touched, code loaded
  std::vector<double> samples;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < inner; ++i)
      pass();
    samples.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
                      inner);
  }
  return median(samples);
}

int run_checksum(const ChecksumOptions& o) {
  // One core for every row: the CRC kernels are single-threaded, and LibTorch's sum would
  // otherwise take every core and read as a baseline no single pass reaches.
  at::set_num_threads(1);
  std::vector<metrics::Row> rows;
  volatile uint32_t sink = 0;  // keeps the checksums from being optimized away
  for (const int64_t bytes : parse_sizes(o.sizes, 4.0)) {
    const int64_t floats = bytes / 4;
    const at::Tensor src = at::randn({floats});
    at::Tensor dst = at::randn({floats});
    at::Tensor out = at::empty({floats});
    const auto n = static_cast<size_t>(floats * 4);
    const auto add = [&](const std::string& op, const std::string& impl,
                         const std::function<void()>& pass) {
      const double s = median_pass_s(floats * 4, o.reps, pass);
      metrics::Row row;
      row[key::kBench] = "checksum";
      row[key::kOp] = op;
      row[key::kImpl] = impl;
      row[key::kBytes] = floats * 4;
      row[key::kMedianS] = s;
      row[key::kBandwidthGbps] = static_cast<double>(n) / s / 1e9;
      row[key::kReps] = o.reps;
      std::cerr << "bench checksum: " << op << " " << impl << " " << n
                << " bytes: " << row[key::kBandwidthGbps].get<double>() << " GB/s" << std::endl;
      rows.push_back(row);
    };
    add("copy", "none", [&] { std::memcpy(out.data_ptr(), src.data_ptr(), n); });
    add("sum", "none", [&] { comm::combine_into(dst, src, comm::ReduceOp::kSum); });
    for (const Crc32cKernel k : crc32c_kernels()) {
      add("crc", to_string(k), [&] { sink = sink + crc32c_with(k, src.data_ptr(), n); });
      add("crc+copy", to_string(k),
          [&] { sink = sink + crc32c_copy_with(k, out.data_ptr(), src.data_ptr(), n); });
      add("crc+sum", to_string(k),
          [&] { sink = sink + comm::combine_with_crcs(dst, src, comm::ReduceOp::kSum, 0, k).out; });
    }
  }
  emit_output(o.output,
              {{key::kOp, "op"},
               {key::kImpl, "kernel"},
               {key::kBytes, "bytes"},
               {key::kMedianS, "median (s)", 6},
               {key::kBandwidthGbps, "GB/s", 2}},
              rows);
  return 0;
}

}  // namespace

void register_bench_checksum(CLI::App& bench, int& exit_code) {
  auto o = std::make_shared<ChecksumOptions>();
  CLI::App* sub = bench.add_subcommand(
      "checksum",
      "the wire check's CRC-32C on one core, per kernel this CPU has (tables, "
      "crc32-instruction, carryless-fold-256, carryless-fold: crc32c_kernel() takes the "
      "fastest) and size: the CRC alone, fused with a copy, fused with a float32 sum (both "
      "CRCs), beside memcpy and the sum without a CRC; GB/s of the bytes checksummed (the "
      "sum's: of one operand)");
  sub->add_option("--sizes", o->sizes,
                  "comma list or range (A:B, x4) of sizes in bytes (K, M, G suffixes): small "
                  "ones stay in cache, large ones come from memory")
      ->capture_default_str();
  sub->add_option("--reps", o->reps, "timed samples per cell, the median is reported")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  add_output_flags(sub, o->output, "--out", /*report=*/false);
  sub->callback([o, &exit_code] { exit_code = run_checksum(*o); });
}

}  // namespace dtrain::cli
