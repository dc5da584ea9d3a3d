// `dtrain bench syncbn`: the SyncBatchNorm grid (batch 32/64 x hidden 128..1024): median
// forward+backward time and peak bytes allocated for batch x hidden on N ranks, our SyncBatchNorm
// next to a local (unsynchronized) torch BatchNorm1d in the same run.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <memory>

#include "dtrain/base/median.h"
#include "dtrain/cli/commands.h"
#include "dtrain/cli/common.h"
#include "dtrain/comm/group.h"
#include "dtrain/metrics/allocations.h"
#include "dtrain/metrics/keys.h"
#include "dtrain/metrics/rows.h"
#include "dtrain/metrics/timer.h"
#include "dtrain/parallel/syncbn.h"

namespace dtrain::cli {

namespace key = metrics::key;
namespace {

struct SyncbnOptions {
  RankFlags rank;
  std::string batches = "32,64";
  std::string hidden = "128,256,512,1024";
  int iters = 2000;
  int warmup = 50;
  Output output;
};

template <typename Module>
std::pair<double, int64_t> measure(Module& bn, comm::Group& g, int64_t batch, int64_t hidden,
                                   int iters, int warmup) {
  const at::Tensor x = at::randn({batch, hidden}).requires_grad_(true);
  const at::Tensor dy = at::randn({batch, hidden});
  std::vector<double> times;
  int64_t peak = 0;
  for (int i = 0; i < warmup + iters; ++i) {
    x.mutable_grad() = at::Tensor();
    for (auto& p : bn->parameters())
      p.mutable_grad() = at::Tensor();
    g.barrier();  // every rank starts together: the time includes waiting for the slowest
    const int64_t before = metrics::allocated_bytes();
    metrics::reset_peak_allocated();
    const double dt = metrics::seconds([&] { bn->forward(x).backward(dy); });
    if (i >= warmup) times.push_back(dt);
    peak = std::max(peak, metrics::peak_allocated_bytes() - before);
  }
  auto t = at::tensor({median(times), static_cast<double>(peak)}, at::kDouble);
  g.native_all_reduce(t, comm::ReduceOp::kMax);
  return {t[0].item<double>(), static_cast<int64_t>(t[1].item<double>())};
}

std::vector<metrics::Row> syncbn_rank(const SyncbnOptions& o, comm::Group& g) {
  metrics::track_allocations();
  at::manual_seed(g.rank());
  std::vector<metrics::Row> rows;
  for (const int b : parse_int_list(o.batches, "--batch-size")) {
    for (const int h : parse_int_list(o.hidden, "--hidden")) {
      parallel::SyncBatchNormOptions so;
      so.num_features = h;
      parallel::SyncBatchNorm sync(g, so);
      torch::nn::BatchNorm1d local(h);
      const auto [sync_s, sync_bytes] = measure(sync, g, b, h, o.iters, o.warmup);
      const auto [local_s, local_bytes] = measure(local, g, b, h, o.iters, o.warmup);
      for (const auto& [impl, s, bytes, comm] :
           {std::tuple<std::string, double, int64_t, int64_t>{"dtrain-syncbn", sync_s, sync_bytes,
                                                              (2 * h + 1) * 8 + 2 * h * 4},
            {"torch-bn-local", local_s, local_bytes, 0}}) {
        metrics::Row r;
        r[key::kImpl] = impl;
        r[key::kBatchSize] = b;
        r[key::kHidden] = h;
        r[key::kRanks] = g.size();
        r[key::kMedianS] = s;
        r[key::kPeakAllocBytes] = bytes;
        r[key::kAllreduceBytes] = comm;
        rows.push_back(r);
      }
    }
  }
  return rows;
}

std::vector<metrics::Column> syncbn_columns() {
  return {{key::kImpl, "impl"},
          {key::kBatchSize, "batch"},
          {key::kHidden, "hidden"},
          {key::kRanks, "ranks"},
          {key::kMedianS, "median fwd+bwd (s)", 6},
          {key::kPeakAllocBytes, "peak alloc (B)"},
          {key::kAllreduceBytes, "all-reduced (B)"}};
}

}  // namespace

void register_bench_syncbn(CLI::App& bench, int& exit_code) {
  auto o = std::make_shared<SyncbnOptions>();
  CLI::App* sub = bench.add_subcommand(
      "syncbn",
      "SyncBatchNorm forward+backward on [batch, hidden] inputs: median time (max over ranks) "
      "and peak bytes allocated, next to a local BatchNorm1d (batch 32/64 x hidden 128..1024)");
  add_rank_flags(sub, o->rank, /*allow_list=*/false);
  sub->add_option("--batch-size", o->batches, "per-rank batch sizes")->capture_default_str();
  sub->add_option("--hidden", o->hidden, "feature counts")->capture_default_str();
  sub->add_option("--iters", o->iters, "timed iterations per point")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  sub->add_option("--warmup", o->warmup, "untimed iterations")->capture_default_str();
  add_output_flags(sub, o->output);
  sub->callback([o, &exit_code] {
    parse_int_list(o->batches, "--batch-size");
    parse_int_list(o->hidden, "--hidden");
    const auto worlds = world_sizes(o->rank);
    if (worlds.size() > 1) throw std::invalid_argument("bench syncbn takes a single -n");
    Output output = o->output;
    output.columns = syncbn_columns();
    exit_code =
        run_ranked(o->rank, worlds, output, [&](comm::Group& g) { return syncbn_rank(*o, g); });
  });
}

}  // namespace dtrain::cli
