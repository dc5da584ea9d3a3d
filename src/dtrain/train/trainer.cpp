#include "dtrain/train/trainer.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "dtrain/comm/agreement.h"
#include "dtrain/comm/group.h"
#include "dtrain/data/loader.h"
#include "dtrain/metrics/cuda_memory.h"
#include "dtrain/metrics/keys.h"
#include "dtrain/metrics/memory.h"
#include "dtrain/metrics/progress.h"
#include "dtrain/models/weights.h"
#include "dtrain/train/checkpointer.h"
#include "dtrain/train/engine.h"
#include "dtrain/train/epoch_loop.h"
#include "dtrain/train/run_setup.h"

namespace dtrain::train {
namespace {

namespace key = metrics::key;

// The mode's engine; nullptr on pipeline followers, which have already run to the end.
std::unique_ptr<Engine> build_engine(const TrainConfig& c, comm::Group* group,
                                     torch::nn::Sequential model, const Loaded& in, bool holds_data,
                                     int64_t parameters) {
  switch (c.parallel.mode) {
    case ParallelMode::kPipeline:
      return make_pipeline_engine(
          *group, model, {c, in.model, parameters, holds_data ? &in.train_set : nullptr, in.norm});
    case ParallelMode::kDdp:
      return make_ddp_engine(*group, std::move(model), c);
    case ParallelMode::kDiloco:
      return make_diloco_engine(*group, std::move(model), c);
    case ParallelMode::kNone:
      break;
  }
  return make_local_engine(std::move(model), models::make_loss(c.loss), c.device, c.memory_format);
}

// PyTorch's "max memory allocated" beside peak RSS, when this rank computes on a GPU.
void record_cuda_memory(const c10::Device& device, EpochStats& s) {
  if (!device.is_cuda()) return;
  const metrics::CudaMemory m = metrics::cuda_memory(device);
  s.extra[key::kCudaMaxAllocatedBytes] = m.max_allocated_bytes;
  s.extra[key::kCudaMaxReservedBytes] = m.max_reserved_bytes;
}

metrics::Row summary_row(const TrainConfig& c, const Loaded& in, int64_t parameters, int ranks,
                         const std::vector<EpochStats>& history) {
  metrics::Row summary;
  summary[key::kSummary] = true;
  summary[key::kModel] = in.model.name;
  summary[key::kDataset] = c.data.name;
  summary[key::kEpochs] = c.epochs;
  summary[key::kParameters] = parameters;
  summary[key::kParallel] = to_string(c.parallel.mode);
  summary[key::kRanks] = ranks;
  summary[key::kBatchSize] = c.batch_size;
  summary[key::kGradAccumSteps] = c.grad_accum_steps;
  summary[key::kFinalTestAcc] = history.back().test_acc;
  summary[key::kFinalTestLoss] = history.back().test_loss;
  if (history.back().extra.contains(key::kTestMcc))
    summary[key::kFinalTestMcc] = history.back().extra[key::kTestMcc];
  double total = 0, samples = 0;
  for (const auto& h : history) {
    total += h.epoch_s;
    samples += h.samples_per_s * h.epoch_s;
  }
  summary[key::kTotalS] = total;
  summary[key::kSamplesPerS] = samples / std::max(1e-9, total);
  summary[key::kThreads] = at::get_num_threads();
  summary[key::kPeakRssBytes] = metrics::peak_rss_bytes();
  return summary;
}

// Checkpoints and resumes are collective: every rank must have the same flags for them, or
// one would wait in a collective the others never join.
void check_checkpoint_flags_agree(const TrainConfig& c, comm::Group& group) {
  const std::string flags = std::to_string(!c.checkpoint_dir.empty()) + "/" +
                            std::to_string(c.resume) + "/" + std::to_string(c.checkpoint_every) +
                            "/" + std::to_string(c.stop_after) + "/" +
                            std::to_string(c.stop_after_steps);
  if (!comm::same_on_all_ranks(group, flags)) {
    throw std::invalid_argument(group.describe() +
                                ": the ranks disagree on --checkpoint-dir, --resume, "
                                "--checkpoint-every or --stop-after(-steps)");
  }
}

}  // namespace

std::vector<EpochStats> train(const TrainConfig& c, comm::Group* group) {
  validate(c, group != nullptr);
  if (group != nullptr) check_checkpoint_flags_agree(c, *group);
  const bool holds_data = c.parallel.mode != ParallelMode::kPipeline || group->rank() == 0;
  torch::manual_seed(c.seed);
  const Loaded in = load(c, group, holds_data);
  // Every rank builds the same initial model: pipeline stages keep their blocks of it.
  torch::manual_seed(c.seed);
  torch::nn::Sequential model = models::make_model(in.model);
  if (!c.weights_path.empty()) {
    const models::WeightsReport loaded = models::load_weights(model, in.model, c.weights_path);
    if (holds_data && (group == nullptr || group->rank() == 0))
      std::cerr << c.weights_path << ": " << models::summary(loaded) << std::endl;
  }
  const int64_t parameters = models::parameter_count(*model);
  const auto engine = build_engine(c, group, std::move(model), in, holds_data, parameters);
  if (!engine) return {};  // a pipeline follower, done
  auto optimizer = make_optimizer(c.optim, engine->parameters());
  const bool leader = engine->rank() == 0;

  std::optional<Checkpointer> checkpointer;
  const RankState rank_state{engine->checkpoint_module(), *optimizer, engine->checkpoint_extra()};
  Position start;
  if (!c.checkpoint_dir.empty()) {
    checkpointer.emplace(c.checkpoint_dir, group, engine->layout(), parameters,
                         engine->replicated());
    if (c.resume) {
      if (auto at = checkpointer->restore(rank_state)) start = *at;
    }
  }
  const auto save = [&](const Position& at) {
    engine->announce_checkpoint(at);
    checkpointer->save(at, rank_state);
  };
  std::ofstream metrics_out = open_rows_file(c.metrics_path, c, leader);
  std::ofstream step_log = open_rows_file(c.step_log_path, c, leader);
  int64_t steps_run = 0;
  EpochInputs inputs{c, in.train_set, in.norm, default_augment(c, in), {}, metrics::Clock::now()};
  inputs.after_step = [&](const StepPoint& p) {
    if (checkpointer && c.checkpoint_every > 0 && !p.last &&
        p.optimizer_steps % c.checkpoint_every == 0)
      save(p.at);
    return c.stop_after_steps == 0 || ++steps_run < c.stop_after_steps;
  };
  metrics::ProgressLine progress(c.progress && leader);
  std::vector<EpochStats> history;
  const int64_t end_epoch =
      c.stop_after > 0 ? std::min(c.epochs, start.epoch + c.stop_after) : c.epochs;
  for (int64_t epoch = start.epoch; epoch < end_epoch; ++epoch) {
    const Position from = epoch == start.epoch ? start : Position{epoch};
    std::optional<EpochStats> trained = train_epoch(inputs, *engine, *optimizer, from, progress);
    if (!trained) break;  // --stop-after-steps
    EpochStats& s = *trained;
    engine->end_epoch(s);
    const Evaluation test = evaluate(*engine, in.test_set, in.norm, c.test_batch_size);
    s.test_loss = test.loss;
    s.test_acc = test.accuracy;
    if (in.test_set.matthews) s.extra[key::kTestMcc] = test.matthews;
    s.peak_rss_bytes = metrics::peak_rss_bytes();
    record_cuda_memory(engine->input_device(), s);
    progress.finish(epoch_line(s, c.epochs));
    if (metrics_out.is_open()) metrics::write_jsonl(metrics_out, {stamped(s.to_row(), c)});
    for (auto& row : s.steps)
      row = stamped(std::move(row), c);
    if (step_log.is_open()) metrics::write_jsonl(step_log, s.steps);
    if (checkpointer) save(Position{epoch + 1});
    history.push_back(s);
  }
  engine->finish();
  if (metrics_out.is_open() && !history.empty()) {
    metrics::write_jsonl(
        metrics_out,
        {stamped(summary_row(c, in, parameters, group != nullptr ? group->size() : 1, history),
                 c)});
  }
  return history;
}

}  // namespace dtrain::train
