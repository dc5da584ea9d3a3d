#include "dtrain/train/trainer.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <iostream>

#include "dtrain/data/loader.h"
#include "dtrain/data/sampler.h"
#include "dtrain/metrics/memory.h"
#include "dtrain/train/checkpoint.h"

namespace dtrain::train {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

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

void validate(const TrainConfig& c) {
  if (c.epochs < 1) throw std::invalid_argument("--epochs must be at least 1");
  if (c.batch_size < 1) throw std::invalid_argument("--batch-size must be at least 1");
  if (!(c.optim.lr > 0)) throw std::invalid_argument("--lr must be positive");
  if (c.optim.schedule != "constant" && c.optim.schedule != "step" &&
      c.optim.schedule != "cosine") {
    throw std::invalid_argument("--schedule must be constant, step or cosine");
  }
  if (c.resume && c.checkpoint_dir.empty()) {
    throw std::invalid_argument("--resume needs --checkpoint-dir");
  }
}

// Mean loss and accuracy over a dataset, in eval mode.
std::pair<double, double> evaluate(torch::nn::Sequential& model, const data::Dataset& d,
                                   const data::Normalization& norm, int64_t batch_size) {
  torch::NoGradGuard no_grad;
  model->eval();
  double loss = 0;
  int64_t correct = 0;
  at::Generator unused = at::detail::createCPUGenerator(0);
  for (int64_t begin = 0; begin < d.size(); begin += batch_size) {
    const int64_t n = std::min(batch_size, d.size() - begin);
    const torch::Tensor x = data::make_batch(d.images.narrow(0, begin, n), norm, {}, unused);
    const torch::Tensor y = d.labels.narrow(0, begin, n);
    const torch::Tensor logits = model->forward(x);
    loss += torch::nn::functional::cross_entropy(logits, y).item<double>() * static_cast<double>(n);
    correct += logits.argmax(1).eq(y).sum().item<int64_t>();
  }
  model->train();
  const double size = static_cast<double>(std::max<int64_t>(1, d.size()));
  return {loss / size, static_cast<double>(correct) / size};
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
  return r;
}

std::vector<metrics::Column> epoch_columns() {
  return {{"epoch", "epoch"},
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
}

std::vector<EpochStats> train(const TrainConfig& c) {
  validate(c);
  torch::manual_seed(c.seed);
  data::DataConfig dc = c.data;
  dc.seed = c.seed;
  data::Splits splits = data::load(dc);
  const data::Dataset train_set = limit(splits.train, c.limit_train);
  const data::Dataset test_set = limit(splits.test, c.limit_test);
  const data::Normalization norm = data::channel_stats(train_set.images);

  models::ModelConfig mc = c.model;
  mc.input_shape = train_set.images.sizes().slice(1).vec();
  mc.in_channels = mc.input_shape[0];
  mc.num_classes = train_set.num_classes;
  torch::nn::Sequential model = models::make_model(mc);
  auto optimizer = make_optimizer(c.optim, model->parameters());

  data::Augment augment;
  const bool colour32 = mc.input_shape[1] >= 32 && !splits.digit_like;
  augment.crop_padding = c.crop_padding >= 0 ? c.crop_padding : (colour32 ? 4 : 0);
  augment.flip = c.flip >= 0 ? c.flip == 1 : !splits.digit_like && colour32;

  int64_t first_epoch = 0;
  if (c.resume) {
    if (auto next = load_checkpoint(c.checkpoint_dir, model, *optimizer)) first_epoch = *next;
  }
  std::ofstream metrics_out;
  if (!c.metrics_path.empty()) {
    metrics_out.open(c.metrics_path, c.resume ? std::ios::app : std::ios::trunc);
    if (!metrics_out) throw std::runtime_error("cannot write " + c.metrics_path);
  }

  data::SamplerConfig sc;
  sc.dataset_size = train_set.size();
  sc.seed = c.seed;
  std::vector<EpochStats> history;
  model->train();
  // A live line on a terminal; an occasional plain line in logs and pipes.
  const bool tty = isatty(STDERR_FILENO) != 0;
  const int64_t end_epoch =
      c.stop_after > 0 ? std::min(c.epochs, first_epoch + c.stop_after) : c.epochs;
  for (int64_t epoch = first_epoch; epoch < end_epoch; ++epoch) {
    EpochStats s;
    s.epoch = epoch + 1;
    const auto epoch_start = Clock::now();
    data::EpochLoader loader(train_set, data::shard_indices(sc, epoch), c.batch_size, norm, augment,
                             c.seed * 7777 + static_cast<uint64_t>(epoch));
    double loss_sum = 0;
    int64_t correct = 0, seen = 0, step = 0;
    auto last_progress = Clock::now();
    while (auto batch = loader.next()) {
      const double lr =
          learning_rate(c.optim, epoch + static_cast<double>(step) / loader.batches(), c.epochs);
      for (auto& group : optimizer->param_groups())
        group.options().set_lr(lr);
      s.lr = lr;
      auto t = Clock::now();
      const torch::Tensor logits = model->forward(batch->inputs);
      const torch::Tensor loss = torch::nn::functional::cross_entropy(logits, batch->labels);
      s.time_forward_s += since(t);
      t = Clock::now();
      optimizer->zero_grad();
      loss.backward();
      s.time_backward_s += since(t);
      t = Clock::now();
      optimizer->step();
      s.time_optimizer_s += since(t);
      const auto n = batch->labels.size(0);
      const double batch_loss = loss.item<double>();
      if (!std::isfinite(batch_loss)) {
        throw std::runtime_error("training diverged: loss is " + std::to_string(batch_loss) +
                                 " at epoch " + std::to_string(epoch + 1) + " step " +
                                 std::to_string(step + 1) + " (lower --lr?)");
      }
      loss_sum += batch_loss * static_cast<double>(n);
      correct += logits.argmax(1).eq(batch->labels).sum().item<int64_t>();
      seen += n;
      ++step;
      if (c.progress && since(last_progress) > (tty ? 1.0 : 15.0)) {
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
    s.train_loss = loss_sum / std::max<int64_t>(1, seen);
    s.train_acc = static_cast<double>(correct) / std::max<int64_t>(1, seen);
    s.samples_per_s = seen / std::max(1e-9, s.epoch_s);
    std::tie(s.test_loss, s.test_acc) = evaluate(model, test_set, norm, c.test_batch_size);
    s.peak_rss_bytes = metrics::peak_rss_bytes();
    if (c.progress) {
      std::cerr << (tty ? "\r" : "") << "epoch " << s.epoch << "/" << c.epochs << ": train loss "
                << std::fixed << std::setprecision(4) << s.train_loss << ", test acc "
                << std::setprecision(2) << 100 * s.test_acc << "%, " << std::setprecision(0)
                << s.samples_per_s << " samples/s, " << std::setprecision(1) << s.epoch_s
                << " s          " << std::endl;
    }
    if (metrics_out.is_open()) metrics::write_jsonl(metrics_out, {s.to_row()});
    if (!c.checkpoint_dir.empty()) save_checkpoint(c.checkpoint_dir, epoch + 1, model, *optimizer);
    history.push_back(s);
  }
  if (metrics_out.is_open() && !history.empty()) {
    metrics::Row summary;
    summary["summary"] = true;
    summary["model"] = mc.name;
    summary["dataset"] = c.data.name;
    summary["epochs"] = c.epochs;
    summary["parameters"] = models::parameter_count(*model);
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

}  // namespace dtrain::train
