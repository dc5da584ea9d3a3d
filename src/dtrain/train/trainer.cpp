#include "dtrain/train/trainer.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <iostream>

#include "dtrain/comm/allreduce.h"
#include "dtrain/comm/group.h"
#include "dtrain/compress/codec.h"
#include "dtrain/data/loader.h"
#include "dtrain/data/sampler.h"
#include "dtrain/metrics/memory.h"
#include "dtrain/metrics/timer.h"
#include "dtrain/parallel/pipeline/pipeline.h"
#include "dtrain/train/checkpoint.h"
#include "dtrain/train/engine.h"

namespace dtrain::train {
namespace {

namespace pp = parallel::pipeline;

using metrics::Clock;
using metrics::since;

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimConfig& o,
                                                        const std::vector<torch::Tensor>& params) {
  if (o.name == "sgd") {
    return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(o.lr)
                                                           .momentum(o.momentum)
                                                           .weight_decay(o.weight_decay)
                                                           .nesterov(o.nesterov));
  }
  if (o.name == "adam") {
    return std::make_unique<torch::optim::Adam>(
        params, torch::optim::AdamOptions(o.lr).weight_decay(o.weight_decay));
  }
  throw std::invalid_argument("unknown optimizer '" + o.name + "' (sgd or adam)");
}

data::Dataset limit(data::Dataset d, int64_t n) {
  if (n > 0 && n < d.size()) {
    d.images = d.images.narrow(0, 0, n);
    d.labels = d.labels.narrow(0, 0, n);
  }
  return d;
}

void validate(const TrainConfig& c, comm::Group* group) {
  if (c.epochs < 1) throw std::invalid_argument("--epochs must be at least 1");
  if (c.batch_size < 1) throw std::invalid_argument("--batch-size must be at least 1");
  if (c.test_batch_size < 1) throw std::invalid_argument("--test-batch-size must be at least 1");
  if (!(c.optim.lr > 0)) throw std::invalid_argument("--lr must be positive");
  if (c.optim.schedule != "constant" && c.optim.schedule != "step" &&
      c.optim.schedule != "cosine") {
    throw std::invalid_argument("--lr-schedule must be constant, step or cosine");
  }
  if (c.resume && c.checkpoint_dir.empty()) {
    throw std::invalid_argument("--resume needs --checkpoint-dir");
  }
  const auto& mode = c.parallel.mode;
  if (mode != "none" && mode != "pipeline" && mode != "ddp")
    throw std::invalid_argument("--parallel must be none, pipeline or ddp");
  if (c.grad_accum_steps < 1) throw std::invalid_argument("--grad-accum-steps must be at least 1");
  if (mode == "pipeline" && c.grad_accum_steps > 1)
    throw std::invalid_argument("--grad-accum-steps: use --chunks to split batches in a pipeline");
  if (mode == "ddp") {
    if (group == nullptr) throw std::invalid_argument("--parallel ddp needs a process group");
    comm::parse_algorithm(c.parallel.ddp.algo);
    compress::parse_codec(c.parallel.ddp.compress_grad);
    if (!(c.parallel.ddp.bucket_mb > 0))
      throw std::invalid_argument("--bucket-mb must be positive");
  } else if (c.parallel.ddp.sync_bn) {
    throw std::invalid_argument("--sync-bn needs --parallel ddp");
  }
  if (mode == "pipeline") {
    if (group == nullptr) throw std::invalid_argument("--parallel pipeline needs a process group");
    if (!c.checkpoint_dir.empty())
      throw std::invalid_argument("--checkpoint-dir is not supported with --parallel pipeline yet");
    const auto& p = c.parallel.pipeline;
    if (p.compress_edges != "client" && p.compress_edges != "all")
      throw std::invalid_argument("--compress-edges must be client or all");
    pp::parse_placement(p.placement);
    pp::parse_schedule(p.schedule);
    compress::parse_codec(p.compress);
    if (!p.compress_grad.empty()) compress::parse_codec(p.compress_grad);
  }
}

// Mean loss and accuracy over a dataset.
// Data-parallel ranks evaluate contiguous shares of the test set and sum.
std::pair<double, double> evaluate(Engine& engine, const data::Dataset& d,
                                   const data::Normalization& norm, int64_t batch_size) {
  const int64_t first = d.size() * engine.rank() / engine.world();
  const int64_t end = d.size() * (engine.rank() + 1) / engine.world();
  std::vector<double> totals{0, 0};
  at::Generator unused = at::detail::createCPUGenerator(0);
  for (int64_t begin = first; begin < end; begin += batch_size) {
    const int64_t n = std::min(batch_size, end - begin);
    const torch::Tensor x = data::make_batch(d.images.narrow(0, begin, n), norm, {}, unused);
    const BatchResult r = engine.eval_batch(x, d.labels.narrow(0, begin, n));
    totals[0] += r.loss_sum;
    totals[1] += static_cast<double>(r.correct);
  }
  engine.sum_over_ranks(totals);
  const double size = static_cast<double>(std::max<int64_t>(1, d.size()));
  return {totals[0] / size, totals[1] / size};
}

// Rank 0 tells pipeline followers, which load no data, the model's input shape and class
// count; a negative class count means rank 0 failed to load the data.
void share_model_shape(comm::Group& group, models::ModelConfig& mc, bool failed) {
  auto t = at::zeros({4}, at::kLong);
  if (group.rank() == 0) {
    if (failed) {
      t[3] = -1;
    } else {
      for (int i = 0; i < 3; ++i)
        t[i] = mc.input_shape[static_cast<size_t>(i)];
      t[3] = mc.num_classes;
    }
  }
  group.native_broadcast(t, 0);
  if (group.rank() == 0) return;
  if (t[3].item<int64_t>() < 0)
    throw std::runtime_error(group.describe() + ": rank 0 could not load the data (see its error)");
  mc.input_shape = {t[0].item<int64_t>(), t[1].item<int64_t>(), t[2].item<int64_t>()};
  mc.num_classes = t[3].item<int64_t>();
}

// Block weights for the partition: measured forward+backward time (rank 0 measures, all
// ranks use its numbers) or parameter counts.
std::vector<double> block_weights(const TrainConfig& c, comm::Group& group,
                                  torch::nn::Sequential& model, const data::Dataset* train_set,
                                  const data::Normalization& norm) {
  std::vector<double> w;
  if (!c.parallel.pipeline.balance_auto) {
    for (const auto& block : model->children())
      w.push_back(static_cast<double>(models::parameter_count(*block)));
    return w;
  }
  auto t = at::zeros({static_cast<int64_t>(model->size())}, at::kDouble);
  if (group.rank() == 0) {
    const int64_t n = std::max<int64_t>(
        1, std::min(train_set->size(), c.batch_size / std::max(1, c.parallel.pipeline.chunks)));
    at::Generator gen = at::detail::createCPUGenerator(c.seed);
    const at::Tensor x = data::make_batch(train_set->images.narrow(0, 0, n), norm, {}, gen);
    const auto times = pp::measure_block_times(model, x, 3);
    for (size_t i = 0; i < times.size(); ++i)
      t[static_cast<int64_t>(i)] = times[i];
    model->zero_grad();
  }
  group.native_broadcast(t, 0);
  for (int64_t i = 0; i < t.numel(); ++i)
    w.push_back(t[i].item<double>());
  return w;
}

pp::PipelineConfig pipeline_config(const TrainConfig& c, int ranks, int64_t blocks,
                                   const std::vector<double>& weights) {
  const auto& o = c.parallel.pipeline;
  pp::PipelineConfig pc;
  pc.partition = pp::make_partition(pp::parse_placement(o.placement), ranks, blocks, o.balance,
                                    weights, o.client_first, o.client_last);
  pc.schedule = pp::parse_schedule(o.schedule);
  pc.micro_batches = o.chunks;
  pc.activation_codec = o.compress;
  pc.gradient_codec = o.compress_grad.empty() ? o.compress : o.compress_grad;
  pc.compress_all_edges = o.compress_edges == "all";
  return pc;
}

// A pipeline follower: run rank 0's commands, stepping this rank's optimizer after each
// training step, until rank 0 says stop.
void follow(pp::Pipeline& pipeline, torch::optim::Optimizer& optimizer) {
  for (;;) {
    const pp::Command cmd = pipeline.next_command();
    if (cmd.kind == pp::CommandKind::kStop) return;
    if (cmd.kind == pp::CommandKind::kTrain) {
      for (auto& group : optimizer.param_groups())
        group.options().set_lr(cmd.lr);
      optimizer.zero_grad();
      pipeline.execute(cmd);
      optimizer.step();
    } else {
      pipeline.execute(cmd);
    }
  }
}

}  // namespace

double learning_rate(const OptimConfig& o, double epoch, int64_t total_epochs) {
  if (o.warmup_epochs > 0 && epoch < o.warmup_epochs)
    return o.lr * (epoch + 1e-9) / o.warmup_epochs;
  const double after = epoch - o.warmup_epochs;
  const double span = std::max(1e-9, static_cast<double>(total_epochs) - o.warmup_epochs);
  if (o.schedule == "step")
    return o.lr * std::pow(o.gamma, std::floor(after / std::max<int64_t>(1, o.step_size)));
  if (o.schedule == "cosine")
    return o.lr * 0.5 * (1 + std::cos(M_PI * std::min(1.0, after / span)));
  return o.lr;
}

metrics::Row EpochStats::to_row() const {
  metrics::Row r;
  r["epoch"] = epoch;
  r["train_loss"] = train_loss;
  r["train_acc"] = train_acc;
  r["test_loss"] = test_loss;
  r["test_acc"] = test_acc;
  r["samples_per_s"] = samples_per_s;
  r["epoch_s"] = epoch_s;
  r["lr"] = lr;
  r["time_data_s"] = time_data_s;
  r["time_forward_s"] = time_forward_s;
  r["time_backward_s"] = time_backward_s;
  r["time_optimizer_s"] = time_optimizer_s;
  r["time_comm_s"] = time_comm_s;
  r["peak_rss_bytes"] = peak_rss_bytes;
  for (const auto& [key, value] : extra.items())
    r[key] = value;
  return r;
}

std::vector<metrics::Column> epoch_columns(bool pipeline) {
  std::vector<metrics::Column> columns{{"epoch", "epoch"},
                                       {"train_loss", "train loss", 4},
                                       {"train_acc", "train acc", 4},
                                       {"test_loss", "test loss", 4},
                                       {"test_acc", "test acc", 4},
                                       {"samples_per_s", "samples/s", 1},
                                       {"epoch_s", "time(s)", 1},
                                       {"time_data_s", "data(s)", 2},
                                       {"time_forward_s", "fwd(s)", 2},
                                       {"time_backward_s", "bwd(s)", 2},
                                       {"time_optimizer_s", "opt(s)", 2},
                                       {"time_comm_s", "comm(s)", 2},
                                       {"peak_rss_bytes", "peakRSS(B)"}};
  if (pipeline) {
    columns.push_back({"compression_ratio", "wire/fp32", 4});
    columns.push_back({"bubble_measured", "bubble", 3});
    columns.push_back({"bubble_ideal", "ideal", 3});
  }
  return columns;
}

std::vector<EpochStats> train(const TrainConfig& c, comm::Group* group) {
  validate(c, group);
  const bool pipelined = c.parallel.mode == "pipeline";
  const bool driver = !pipelined || group->rank() == 0;
  torch::manual_seed(c.seed);
  data::Dataset train_set, test_set;
  data::Normalization norm;
  bool digit_like = false;
  models::ModelConfig mc = c.model;
  if (driver) {
    try {
      data::DataConfig dc = c.data;
      dc.seed = c.seed;
      data::Splits splits = data::load(dc);
      train_set = limit(splits.train, c.limit_train);
      test_set = limit(splits.test, c.limit_test);
      digit_like = splits.digit_like;
    } catch (...) {
      if (pipelined) share_model_shape(*group, mc, true);
      throw;
    }
    norm = data::channel_stats(train_set.images);
    mc.input_shape = train_set.images.sizes().slice(1).vec();
    mc.num_classes = train_set.num_classes;
  }
  if (pipelined) share_model_shape(*group, mc, false);
  mc.in_channels = mc.input_shape[0];
  // Every rank builds the same initial model: pipeline stages keep their blocks of it.
  torch::manual_seed(c.seed);
  torch::nn::Sequential model = models::make_model(mc);
  const int64_t parameters = models::parameter_count(*model);

  std::unique_ptr<pp::Pipeline> pipeline;
  std::unique_ptr<Engine> engine;
  if (pipelined) {
    const auto weights = block_weights(c, *group, model, driver ? &train_set : nullptr, norm);
    pipeline = std::make_unique<pp::Pipeline>(
        *group, model,
        pipeline_config(c, group->size(), static_cast<int64_t>(model->size()), weights));
    model = torch::nn::Sequential(nullptr);  // keep only this rank's blocks alive
    if (!driver) {
      auto optimizer = make_optimizer(c.optim, pipeline->parameters());
      follow(*pipeline, *optimizer);
      return {};
    }
    engine = make_pipeline_engine(*pipeline);
  } else if (c.parallel.mode == "ddp") {
    engine = make_ddp_engine(*group, model, c);
  } else {
    engine = make_local_engine(model);
  }
  auto optimizer = make_optimizer(c.optim, engine->parameters());
  const bool leader = engine->rank() == 0;

  data::Augment augment;
  const bool colour32 = mc.input_shape[1] >= 32 && !digit_like;
  augment.crop_padding = c.crop_padding >= 0 ? c.crop_padding : (colour32 ? 4 : 0);
  augment.flip = c.flip >= 0 ? c.flip == 1 : !digit_like && colour32;

  int64_t first_epoch = 0;
  if (c.resume) {
    if (auto next = load_checkpoint(c.checkpoint_dir, engine->checkpoint_module(), *optimizer))
      first_epoch = *next;
  }
  std::ofstream metrics_out;
  if (!c.metrics_path.empty() && leader) {
    metrics_out.open(c.metrics_path, c.resume ? std::ios::app : std::ios::trunc);
    if (!metrics_out) throw std::runtime_error("cannot write " + c.metrics_path);
  }

  data::SamplerConfig sc;
  sc.dataset_size = train_set.size();
  sc.seed = c.seed;
  sc.rank = engine->rank();
  sc.world_size = engine->world();
  const bool progress = c.progress && leader;
  std::vector<EpochStats> history;
  // A live line on a terminal; an occasional plain line in logs and pipes.
  const bool tty = isatty(STDERR_FILENO) != 0;
  const int64_t end_epoch =
      c.stop_after > 0 ? std::min(c.epochs, first_epoch + c.stop_after) : c.epochs;
  for (int64_t epoch = first_epoch; epoch < end_epoch; ++epoch) {
    EpochStats s;
    s.epoch = epoch + 1;
    const auto epoch_start = Clock::now();
    std::vector<int64_t> shard = data::shard_indices(sc, epoch);
    const auto shard_size = static_cast<int64_t>(shard.size());
    data::EpochLoader loader(train_set, std::move(shard), c.batch_size, norm, augment,
                             c.seed * 7777 + static_cast<uint64_t>(epoch) +
                                 1000003ull * static_cast<uint64_t>(engine->rank()));
    double loss_sum = 0;
    int64_t correct = 0, seen = 0, step = 0;
    auto last_progress = Clock::now();
    // Gradient accumulation: groups of K batches; each batch's loss is weighted by its share
    // of the group's samples, so a group equals one batch K times larger.
    const int64_t k = c.grad_accum_steps;
    auto group_samples = [&](int64_t first_batch) {
      int64_t n = 0;
      for (int64_t b = first_batch; b < std::min(first_batch + k, loader.batches()); ++b)
        n += std::min(c.batch_size, shard_size - b * c.batch_size);
      return n;
    };
    while (auto batch = loader.next()) {
      const bool group_start = step % k == 0;
      const bool group_end = step % k == k - 1 || step + 1 == loader.batches();
      const double lr =
          learning_rate(c.optim, epoch + static_cast<double>(step) / loader.batches(), c.epochs);
      for (auto& group : optimizer->param_groups())
        group.options().set_lr(lr);
      s.lr = lr;
      if (group_start) optimizer->zero_grad();
      StepPlan plan;
      plan.sync = group_end;
      plan.loss_scale = k == 1 ? 1.0
                               : static_cast<double>(batch->labels.size(0)) /
                                     static_cast<double>(group_samples(step - step % k));
      const BatchResult r = engine->train_batch(*batch, lr, plan, s);
      if (group_end) {
        const auto t = Clock::now();
        optimizer->step();
        s.time_optimizer_s += since(t);
      }
      const double batch_loss = r.loss_sum / static_cast<double>(std::max<int64_t>(1, r.samples));
      if (!std::isfinite(batch_loss)) {
        throw std::runtime_error("training diverged: loss is " + std::to_string(batch_loss) +
                                 " at epoch " + std::to_string(epoch + 1) + " step " +
                                 std::to_string(step + 1) + " (lower --lr?)");
      }
      loss_sum += r.loss_sum;
      correct += r.correct;
      seen += r.samples;
      ++step;
      if (progress && since(last_progress) > (tty ? 1.0 : 15.0)) {
        last_progress = Clock::now();
        std::cerr << (tty ? "\r" : "") << "epoch " << epoch + 1 << "/" << c.epochs << " [" << step
                  << "/" << loader.batches() << "] loss " << std::fixed << std::setprecision(4)
                  << loss_sum / seen << " acc " << std::setprecision(2) << 100.0 * correct / seen
                  << "% " << std::setprecision(0) << seen / since(epoch_start) << " samples/s   "
                  << (tty ? "" : "\n") << std::flush;
      }
    }
    s.time_data_s = loader.wait_s();
    s.epoch_s = since(epoch_start);
    s.extra["steps"] = (step + k - 1) / k;  // optimizer steps
    std::vector<double> totals{loss_sum, static_cast<double>(correct), static_cast<double>(seen)};
    engine->sum_over_ranks(totals);
    loss_sum = totals[0];
    correct = static_cast<int64_t>(totals[1]);
    seen = static_cast<int64_t>(totals[2]);
    s.train_loss = loss_sum / std::max<int64_t>(1, seen);
    s.train_acc = static_cast<double>(correct) / std::max<int64_t>(1, seen);
    s.samples_per_s = seen / std::max(1e-9, s.epoch_s);
    engine->end_epoch(s);
    std::tie(s.test_loss, s.test_acc) = evaluate(*engine, test_set, norm, c.test_batch_size);
    s.peak_rss_bytes = metrics::peak_rss_bytes();
    if (progress) {
      std::cerr << (tty ? "\r" : "") << "epoch " << s.epoch << "/" << c.epochs << ": train loss "
                << std::fixed << std::setprecision(4) << s.train_loss << ", test acc "
                << std::setprecision(2) << 100 * s.test_acc << "%, " << std::setprecision(0)
                << s.samples_per_s << " samples/s, " << std::setprecision(1) << s.epoch_s
                << " s          " << std::endl;
    }
    if (metrics_out.is_open()) metrics::write_jsonl(metrics_out, {s.to_row()});
    if (!c.checkpoint_dir.empty() && leader)
      save_checkpoint(c.checkpoint_dir, epoch + 1, engine->checkpoint_module(), *optimizer);
    history.push_back(s);
  }
  engine->finish();
  if (metrics_out.is_open() && !history.empty()) {
    metrics::Row summary;
    summary["summary"] = true;
    summary["model"] = mc.name;
    summary["dataset"] = c.data.name;
    summary["epochs"] = c.epochs;
    summary["parameters"] = parameters;
    summary["parallel"] = c.parallel.mode;
    summary["ranks"] = group != nullptr ? group->size() : 1;
    summary["batch_size"] = c.batch_size;
    summary["grad_accum_steps"] = c.grad_accum_steps;
    summary["final_test_acc"] = history.back().test_acc;
    summary["final_test_loss"] = history.back().test_loss;
    double total = 0, samples = 0;
    for (const auto& h : history) {
      total += h.epoch_s;
      samples += h.samples_per_s * h.epoch_s;
    }
    summary["total_s"] = total;
    summary["samples_per_s"] = samples / std::max(1e-9, total);
    summary["threads"] = at::get_num_threads();
    summary["peak_rss_bytes"] = metrics::peak_rss_bytes();
    metrics::write_jsonl(metrics_out, {summary});
  }
  return history;
}

std::vector<metrics::Row> stage_rows(const EpochStats& s) {
  std::vector<metrics::Row> rows;
  if (s.extra.contains("stages"))
    for (const auto& r : s.extra["stages"])
      rows.push_back(r);
  return rows;
}

std::vector<metrics::Column> stage_columns() {
  return {{"rank", "rank"},
          {"blocks", "blocks"},
          {"forward_s", "fwd(s)", 2},
          {"backward_s", "bwd(s)", 2},
          {"encode_s", "encode(s)", 2},
          {"decode_s", "decode(s)", 2},
          {"recv_wait_s", "recv wait(s)", 2},
          {"send_wait_s", "send wait(s)", 2},
          {"idle_s", "idle(s)", 2},
          {"bubble", "bubble", 3},
          {"peak_rss_bytes", "peakRSS(B)"}};
}

std::vector<metrics::Row> link_rows(const EpochStats& s) {
  std::vector<metrics::Row> rows;
  if (s.extra.contains("links"))
    for (const auto& r : s.extra["links"])
      rows.push_back(r);
  return rows;
}

std::vector<metrics::Column> link_columns() {
  return {{"src", "src"},
          {"dst", "dst"},
          {"direction", "direction"},
          {"messages", "messages"},
          {"bytes", "bytes"},
          {"recv_time_s", "recv time(s)", 3},
          {"bandwidth_gbps", "GB/s", 3},
          {"ratio", "wire/fp32", 4}};
}

}  // namespace dtrain::train
