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

namespace dtrain::train {
namespace {

namespace key = metrics::key;

data::Dataset limit(data::Dataset d, int64_t n) {
  if (n > 0 && n < d.size()) {
    d.images = d.images.narrow(0, 0, n);
    d.labels = d.labels.narrow(0, 0, n);
    if (d.masks.defined()) d.masks = d.masks.narrow(0, 0, n);
  }
  return d;
}

// What the ranks that hold data loaded, and the model config completed from it.
struct Loaded {
  data::Dataset train_set, test_set;
  data::Normalization norm;
  bool digit_like = false;
  models::ModelConfig model;
};

// Loads the data on the ranks that hold it (all but pipeline followers) and completes the
// model's input shape and class count; pipeline followers receive those from rank 0.
Loaded load(const TrainConfig& c, comm::Group* group, bool holds_data) {
  const bool pipelined = c.parallel.mode == ParallelMode::kPipeline;
  Loaded in;
  in.model = c.model;
  if (holds_data) {
    try {
      data::DataConfig dc = c.data;
      dc.seed = c.seed;
      data::Splits splits = data::load(dc);
      in.train_set = limit(splits.train, c.limit_train);
      in.test_set = limit(splits.test, c.limit_test);
      in.digit_like = splits.digit_like;
      if (splits.vocab_size > 0) {
        in.model.transformer.vocab = splits.vocab_size;
        in.model.transformer.pad_id = splits.pad_id;
      }
    } catch (...) {
      if (pipelined) share_model_shape(*group, in.model, true);
      throw;
    }
    if (!models::takes_tokens(in.model)) in.norm = data::channel_stats(in.train_set.images);
    in.model.input_shape = in.train_set.images.sizes().slice(1).vec();
    in.model.num_classes = in.train_set.num_classes;
  }
  if (pipelined) share_model_shape(*group, in.model, false);
  in.model.in_channels = in.model.input_shape[0];
  return in;
}

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

data::Augment default_augment(const TrainConfig& c, const Loaded& in) {
  data::Augment augment;
  if (in.model.input_shape.size() != 3) return augment;  // text
  const bool colour32 = in.model.input_shape[1] >= 32 && !in.digit_like;
  augment.crop_padding = c.crop_padding >= 0 ? c.crop_padding : (colour32 ? 4 : 0);
  augment.flip = c.flip >= 0 ? c.flip == 1 : !in.digit_like && colour32;
  return augment;
}

// PyTorch's "max memory allocated" beside peak RSS, when this rank computes on a GPU.
void record_cuda_memory(const c10::Device& device, EpochStats& s) {
  if (!device.is_cuda()) return;
  const metrics::CudaMemory m = metrics::cuda_memory(device);
  s.extra[key::kCudaMaxAllocatedBytes] = m.max_allocated_bytes;
  s.extra[key::kCudaMaxReservedBytes] = m.max_reserved_bytes;
}

std::string epoch_line(const EpochStats& s, int64_t epochs) {
  std::ostringstream line;
  line << "epoch " << s.epoch << "/" << epochs << ": train loss " << std::fixed
       << std::setprecision(4) << s.train_loss << ", test acc " << std::setprecision(2)
       << 100 * s.test_acc << "%, ";
  if (s.extra.contains(key::kTestMcc))
    line << "test MCC " << std::setprecision(4) << s.extra[key::kTestMcc].get<double>() << ", ";
  line << std::setprecision(0) << s.samples_per_s << " samples/s, " << std::setprecision(1)
       << s.epoch_s << " s";
  if (s.extra.contains(key::kWireCheckCost)) {
    line << "; wire check " << std::showpos << std::setprecision(2)
         << 100 * s.extra[key::kWireCheckCost].get<double>() << std::noshowpos << " % +- "
         << 100 * s.extra[key::kWireCheckCostCi95].get<double>() << " % of step time ("
         << s.extra[key::kWireCheckPairs].get<int64_t>() << " pairs)";
  }
  return line.str();
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

// A metrics row as written: with the command line that produced it.
metrics::Row stamped(metrics::Row row, const TrainConfig& c) {
  if (!c.command.empty()) row[key::kCommand] = c.command;
  return row;
}

// A JSON-lines output of rank 0's (--metrics, --step-log), continued by a resumed run.
std::ofstream open_rows_file(const std::string& path, const TrainConfig& c, bool leader) {
  std::ofstream out;
  if (path.empty() || !leader) return out;
  out.open(path, c.resume ? std::ios::app : std::ios::trunc);
  if (!out) throw std::runtime_error("cannot write " + path);
  return out;
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
