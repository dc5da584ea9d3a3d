// `dtrain scale`: the data-parallel scaling study. Runs `dtrain train --parallel
// ddp` for every (ranks, per-rank batch), times the last epoch (the first ones warm up)
// without data wait, and prints speedups, computation vs communication and bandwidth
// utilization (metrics/scaling.h).
#include <fstream>
#include <iostream>
#include <memory>

#include "dtrain/cli/commands.h"
#include "dtrain/cli/common.h"
#include "dtrain/comm/launch.h"
#include "dtrain/metrics/keys.h"
#include "dtrain/metrics/scaling.h"

namespace dtrain::cli {

namespace key = metrics::key;
namespace {

struct ScaleOptions {
  std::string model = "resnet18";
  std::string dataset = "fashion-mnist";
  std::string data_dir;
  std::string ranks = "1,2,4";
  std::string batches = "32,128,512";
  int64_t epochs = 2;
  int64_t limit_train = 0;
  int64_t limit_test = 1000;
  double lr = 0.05;
  std::string algo = "auto";
  double bucket_mb = 25;
  uint64_t seed = 0;
  Output output;
  double timeout_s = 300;
};

std::string status_text(int status) {
  if (status == 137) return "killed (SIGKILL: out of memory?)";
  if (status > 128) return "killed by signal " + std::to_string(status - 128);
  return "failed (exit " + std::to_string(status) + ")";
}

metrics::ScalingRun run_one(const ScaleOptions& o, int ranks, int64_t batch) {
  metrics::ScalingRun run;
  run.ranks = ranks;
  run.batch = batch;
  TempFile metrics_file("scale");
  comm::LaunchOptions lo;
  lo.nprocs = ranks;
  lo.command = {self_executable(),
                "train",
                "--parallel",
                "ddp",
                "--model",
                o.model,
                "--dataset",
                o.dataset,
                "--batch-size",
                std::to_string(batch),
                "--epochs",
                std::to_string(o.epochs),
                "--lr",
                std::to_string(o.lr),
                "--algo",
                o.algo,
                "--bucket-mb",
                std::to_string(o.bucket_mb),
                "--seed",
                std::to_string(o.seed),
                "--limit-test",
                std::to_string(o.limit_test),
                "--timeout",
                std::to_string(o.timeout_s),
                "--metrics",
                metrics_file.path(),
                "--quiet"};
  if (!o.data_dir.empty()) lo.command.insert(lo.command.end(), {"--data-dir", o.data_dir});
  if (o.limit_train > 0)
    lo.command.insert(lo.command.end(), {"--limit-train", std::to_string(o.limit_train)});
  const int status = comm::launch(lo);
  if (status != 0) {
    run.status = status_text(status);
    return run;
  }
  std::ifstream in(metrics_file.path());
  const auto rows = metrics::read_jsonl(in, metrics_file.path());
  const metrics::Row* last = nullptr;
  const metrics::Row* summary = nullptr;
  for (const auto& r : rows)
    (r.contains(key::kSummary) ? summary : last) = &r;
  if (last == nullptr || summary == nullptr) {
    run.status = "no metrics";
    return run;
  }
  const auto num = [&](const char* key) { return last->value(key, 0.0); };
  run.epoch_s = num(key::kEpochS) - num(key::kTimeDataS);
  run.compute_s = num(key::kTimeForwardS) + num(key::kTimeBackwardS) + num(key::kTimeOptimizerS);
  run.comm_exposed_s = num(key::kTimeCommS);
  run.comm_total_s = num(key::kCommTotalS);
  run.steps = last->value(key::kSteps, int64_t{0});
  run.model_bytes = 4 * summary->value(key::kParameters, int64_t{0});
  run.test_acc = num(key::kTestAcc);
  run.peak_rss_bytes = last->value(key::kPeakRssBytes, int64_t{0});
  return run;
}

}  // namespace

void register_scale(CLI::App& parent, int& exit_code) {
  auto o = std::make_shared<ScaleOptions>();
  CLI::App* sub = parent.add_subcommand(
      "scale",
      "data-parallel scaling study: train with DDP for every (ranks, per-rank batch), time the "
      "last epoch, report speedups and computation vs communication");
  sub->add_option("--model", o->model, "model from the zoo")->capture_default_str();
  sub->add_option("--dataset", o->dataset, "dataset (see dtrain train)")->capture_default_str();
  sub->add_option("--data-dir", o->data_dir, "dataset folder");
  sub->add_option("-n,--nprocs", o->ranks, "rank counts, e.g. 1,2,4 (1 is the baseline)")
      ->capture_default_str();
  sub->add_option("--batch-size", o->batches, "per-rank batch sizes")->capture_default_str();
  sub->add_option("--epochs", o->epochs, "epochs per run; the last is timed")
      ->capture_default_str();
  sub->add_option("--limit-train", o->limit_train, "use only the first N training samples");
  sub->add_option("--limit-test", o->limit_test, "test samples per evaluation")
      ->capture_default_str();
  sub->add_option("--lr", o->lr, "learning rate")->capture_default_str();
  sub->add_option("--algo", o->algo, "all-reduce algorithm")->capture_default_str();
  sub->add_option("--bucket-mb", o->bucket_mb, "DDP bucket size")->capture_default_str();
  sub->add_option("--seed", o->seed, "seed")->capture_default_str();
  sub->add_option("--timeout", o->timeout_s, "per-operation timeout of the runs (s)")
      ->capture_default_str();
  add_output_flags(sub, o->output, "--out,--output");
  sub->callback([o, &exit_code] {
    if (o->epochs < 1) throw std::invalid_argument("--epochs must be at least 1");
    const auto ranks = parse_int_list(o->ranks, "-n");
    const auto batches = parse_int_list(o->batches, "--batch-size");
    for (int n : ranks)
      if (n < 1) throw std::invalid_argument("-n values must be at least 1");
    for (int b : batches)
      if (b < 1) throw std::invalid_argument("--batch-size values must be at least 1");
    std::vector<metrics::ScalingRun> runs;
    for (const int n : ranks) {
      for (const int b : batches) {
        std::cerr << "scale: " << n << " rank(s), batch " << b << " per rank ..." << std::endl;
        runs.push_back(run_one(*o, n, b));
        const auto& r = runs.back();
        std::cerr << "scale: " << n << " rank(s), batch " << b << ": "
                  << (r.status == "ok" ? std::to_string(r.epoch_s) + " s per epoch" : r.status)
                  << std::endl;
      }
    }
    emit_output(o->output, metrics::scaling_columns(), metrics::scaling_rows(runs));
    exit_code = 0;  // a failed run (e.g. out of memory) is a result of the study, not an error
  });
}

}  // namespace dtrain::cli
