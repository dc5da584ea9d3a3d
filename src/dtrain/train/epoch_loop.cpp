#include "dtrain/train/epoch_loop.h"

#include <cmath>
#include <iomanip>
#include <sstream>

#include "dtrain/data/sampler.h"
#include "dtrain/metrics/keys.h"
#include "dtrain/metrics/timer.h"
#include "dtrain/metrics/trace.h"
#include "dtrain/train/optimizer.h"

namespace dtrain::train {
namespace {

using metrics::Clock;
using metrics::since;

// Running sums of one epoch.
struct Tally {
  double loss_sum = 0;
  int64_t correct = 0, seen = 0;
  void add(const BatchResult& r) {
    loss_sum += r.loss_sum;
    correct += r.correct;
    seen += r.samples;
  }
};

// The step log: a row every `every` batches and at the epoch's end, each with what this
// rank's batches gave since the previous row (a curve that follows the run closely, not a
// running mean since the epoch's start).
class StepLogger {
 public:
  StepLogger(int64_t epoch, int64_t batches, int64_t every, Clock::time_point run_start,
             const Tally& from)
      : epoch_(epoch),
        batches_(batches),
        every_(every > 0 ? every : std::max<int64_t>(1, batches / 50)),
        run_start_(run_start),
        last_(from),
        last_time_(Clock::now()) {}

  void after_batch(int64_t step, const Tally& now, std::vector<metrics::Row>& out) {
    if (step % every_ != 0 && step != batches_) return;
    const auto t = Clock::now();
    const double seen = static_cast<double>(now.seen - last_.seen);
    if (seen <= 0) return;
    namespace key = metrics::key;
    metrics::Row row;
    row[key::kStep] = epoch_ * batches_ + step;
    row[key::kEpochProgress] = static_cast<double>(epoch_) + static_cast<double>(step) / batches_;
    row[key::kElapsedS] = std::chrono::duration<double>(t - run_start_).count();
    row[key::kTrainLoss] = (now.loss_sum - last_.loss_sum) / seen;
    row[key::kTrainAcc] = static_cast<double>(now.correct - last_.correct) / seen;
    row[key::kSamplesPerS] =
        seen / std::max(1e-9, std::chrono::duration<double>(t - last_time_).count());
    out.push_back(std::move(row));
    last_ = now;
    last_time_ = t;
  }

 private:
  int64_t epoch_, batches_, every_;
  Clock::time_point run_start_;
  Tally last_;
  Clock::time_point last_time_;
};

// Gradient accumulation: groups of K batches; each batch's loss is weighted by its share of
// the group's samples, so a group equals one batch K times larger.
StepPlan step_plan(int64_t step, int64_t k, int64_t batches, int64_t batch_size, int64_t shard,
                   int64_t this_batch) {
  StepPlan plan;
  plan.sync = step % k == k - 1 || step + 1 == batches;
  plan.epoch_steps = (batches + k - 1) / k;
  plan.epoch_step = step / k;
  if (k == 1) return plan;
  const int64_t first = step - step % k;
  int64_t group = 0;
  for (int64_t b = first; b < std::min(first + k, batches); ++b)
    group += std::min(batch_size, shard - b * batch_size);
  plan.loss_scale = static_cast<double>(this_batch) / static_cast<double>(group);
  return plan;
}

data::Batch on_device(const data::Batch& batch, const c10::Device& device) {
  if (device.is_cpu()) return batch;
  data::Batch b = batch;
  b.inputs = batch.inputs.to(device);
  b.labels = batch.labels.to(device);
  if (batch.mask.defined()) b.mask = batch.mask.to(device);
  return b;
}

void check_finite(double batch_loss, int64_t epoch, int64_t step) {
  if (std::isfinite(batch_loss)) return;
  throw std::runtime_error("training diverged: loss is " + std::to_string(batch_loss) +
                           " at epoch " + std::to_string(epoch + 1) + " step " +
                           std::to_string(step + 1) + " (lower --lr?)");
}

}  // namespace

std::optional<EpochStats> train_epoch(const EpochInputs& in, Engine& engine,
                                      torch::optim::Optimizer& optimizer, const Position& from,
                                      metrics::ProgressLine& progress) {
  const TrainConfig& c = in.config;
  const int64_t epoch = from.epoch;
  EpochStats s;
  s.epoch = epoch + 1;
  const auto epoch_start = Clock::now();
  data::SamplerConfig sc;
  sc.dataset_size = in.train_set.size();
  sc.seed = c.seed;
  sc.rank = engine.rank();
  sc.world_size = engine.world();
  std::vector<int64_t> shard = data::shard_indices(sc, epoch);
  const auto shard_size = static_cast<int64_t>(shard.size());
  data::EpochLoader loader(in.train_set, std::move(shard), c.batch_size, in.norm, in.augment,
                           c.seed * 7777 + static_cast<uint64_t>(epoch) +
                               1000003ull * static_cast<uint64_t>(engine.rank()),
                           /*prefetch=*/4, /*skip=*/from.step);
  Tally tally{from.loss_sum, from.correct, from.seen};
  StepLogger step_log(epoch, loader.batches(), c.log_every, in.run_start, tally);
  int64_t step = from.step;
  const int64_t k = c.grad_accum_steps;
  while (auto batch = loader.next()) {
    const double lr =
        learning_rate(c.optim, epoch + static_cast<double>(step) / loader.batches(), c.epochs);
    set_learning_rate(optimizer, lr);
    s.lr = lr;
    if (step % k == 0) optimizer.zero_grad();
    const StepPlan plan =
        step_plan(step, k, loader.batches(), c.batch_size, shard_size, batch->labels.size(0));
    const BatchResult r = engine.train_batch(on_device(*batch, engine.input_device()), lr, plan, s);
    if (plan.sync) {
      const auto t = Clock::now();
      optimizer.step();
      s.time_optimizer_s += metrics::trace::span_since("compute", "optimizer step", t);
      engine.after_optimizer_step(s, step + 1 == loader.batches());
    }
    check_finite(r.loss_sum / static_cast<double>(std::max<int64_t>(1, r.samples)), epoch, step);
    tally.add(r);
    ++step;
    step_log.after_batch(step, tally, s.steps);
    if (plan.sync && in.after_step) {
      const StepPoint point{{epoch, step, tally.loss_sum, tally.correct, tally.seen},
                            (step + k - 1) / k,
                            step == loader.batches()};
      if (!in.after_step(point)) return std::nullopt;
    }
    progress.update([&] {
      std::ostringstream line;
      line << "epoch " << epoch + 1 << "/" << c.epochs << " [" << step << "/" << loader.batches()
           << "] loss " << std::fixed << std::setprecision(4) << tally.loss_sum / tally.seen
           << " acc " << std::setprecision(2) << 100.0 * tally.correct / tally.seen << "% "
           << std::setprecision(0) << (tally.seen - from.seen) / since(epoch_start) << " samples/s";
      return line.str();
    });
  }
  s.time_data_s = loader.wait_s();
  s.epoch_s = since(epoch_start);
  s.extra[metrics::key::kSteps] = (step + k - 1) / k;  // optimizer steps
  // Throughput counts the samples of this run only (a resumed epoch's first part was timed
  // by the run before).
  std::vector<double> totals{tally.loss_sum, static_cast<double>(tally.correct),
                             static_cast<double>(tally.seen),
                             static_cast<double>(tally.seen - from.seen)};
  engine.sum_over_ranks(totals);
  const double seen = std::max(1.0, totals[2]);
  s.train_loss = totals[0] / seen;
  s.train_acc = static_cast<double>(static_cast<int64_t>(totals[1])) / seen;
  s.samples_per_s =
      static_cast<double>(static_cast<int64_t>(totals[3])) / std::max(1e-9, s.epoch_s);
  return s;
}

Evaluation evaluate(Engine& engine, const data::Dataset& d, const data::Normalization& norm,
                    int64_t batch_size) {
  const int64_t first = d.size() * engine.rank() / engine.world();
  const int64_t end = d.size() * (engine.rank() + 1) / engine.world();
  std::vector<double> totals(6, 0.0);  // loss, correct, confusion (4)
  at::Generator unused = at::detail::createCPUGenerator(0);
  for (int64_t begin = first; begin < end; begin += batch_size) {
    const int64_t n = std::min(batch_size, end - begin);
    const at::Tensor x = data::make_batch(d.images.narrow(0, begin, n), norm, {}, unused);
    const at::Tensor mask = d.masks.defined() ? d.masks.narrow(0, begin, n) : at::Tensor();
    const BatchResult r = engine.eval_batch(
        on_device({x, d.labels.narrow(0, begin, n), mask, {}}, engine.input_device()));
    totals[0] += r.loss_sum;
    totals[1] += static_cast<double>(r.correct);
    for (size_t i = 0; i < r.confusion.size(); ++i)
      totals[2 + i] += static_cast<double>(r.confusion[i]);
  }
  engine.sum_over_ranks(totals);
  const double size = static_cast<double>(std::max<int64_t>(1, d.size()));
  std::array<int64_t, 4> confusion{};
  for (size_t i = 0; i < confusion.size(); ++i)
    confusion[i] = static_cast<int64_t>(totals[2 + i]);
  return {totals[0] / size, totals[1] / size, models::matthews_correlation(confusion)};
}

}  // namespace dtrain::train
