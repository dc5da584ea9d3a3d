// Pipeline mode: rank 0 drives steps through parallel::pipeline::Pipeline and turns each
// epoch's per-rank reports into EpochStats::extra; the other ranks follow its commands.
#include <ATen/ATen.h>

#include "dtrain/comm/group.h"
#include "dtrain/metrics/alternating_cost.h"
#include "dtrain/metrics/keys.h"
#include "dtrain/metrics/timer.h"
#include "dtrain/metrics/trace.h"
#include "dtrain/models/batch_context.h"
#include "dtrain/parallel/pipeline/block_times.h"
#include "dtrain/parallel/pipeline/pipeline.h"
#include "dtrain/train/checkpointer.h"
#include "dtrain/train/engine.h"
#include "dtrain/train/model_shape.h"
#include "dtrain/train/optimizer.h"

namespace dtrain::train {
namespace {

namespace pp = parallel::pipeline;

BatchResult to_batch_result(const pp::StepResult& r) {
  return {r.loss_sum, r.correct, r.samples, r.confusion};
}

// This rank's stages as one module (what its checkpoint shard holds).
torch::nn::Sequential stages_module(const pp::Pipeline& pipeline) {
  torch::nn::Sequential local;
  for (const auto& m : pipeline.stage_modules()) {
    std::ptrdiff_t i = 0;
    for (const auto& named : m->named_children())
      local->push_back(named.key(), m->begin()[i++]);
  }
  return local;
}

void record_check_cost(const metrics::AlternatingCost& cost, EpochStats& s) {
  namespace key = metrics::key;
  const auto c = cost.summary();
  s.extra[key::kWireCheckPairs] = c.pairs;
  s.extra[key::kStepSCheckOff] = c.off_s;
  s.extra[key::kStepSCheckOn] = c.on_s;
  s.extra[key::kWireCheckCost] = c.cost;
  s.extra[key::kWireCheckCostCi95] = c.cost_ci95;
}

class PipelineEngine final : public Engine {
 public:
  // job_wire_check: the group's setting, which evaluation keeps under --measure-wire-check.
  PipelineEngine(std::unique_ptr<pp::Pipeline> pipeline, bool measure_wire_check,
                 bool job_wire_check)
      : pipeline_(std::move(pipeline)),
        local_(stages_module(*pipeline_)),
        job_wire_check_(job_wire_check) {
    if (measure_wire_check) check_cost_.emplace();
  }

  c10::Device input_device() const override { return pipeline_->device(); }

  std::vector<at::Tensor> parameters() override { return pipeline_->parameters(); }

  BatchResult train_batch(const data::Batch& batch, double lr, const StepPlan&,
                          EpochStats&) override {
    if (!check_cost_)
      return to_batch_result(
          pipeline_->train_batch(batch.inputs, batch.labels, batch.mask, lr, batch.ids));
    pipeline_->set_wire_check(check_cost_->next_on());
    const auto start = metrics::Clock::now();
    const auto result =
        pipeline_->train_batch(batch.inputs, batch.labels, batch.mask, lr, batch.ids);
    check_cost_->record(metrics::since(start), batch.inputs.size(0));
    return to_batch_result(result);
  }

  BatchResult eval_batch(const data::Batch& batch) override {
    return to_batch_result(pipeline_->eval_batch(batch.inputs, batch.labels, batch.mask));
  }

  void end_epoch(EpochStats& s) override {
    if (check_cost_) {
      pipeline_->set_wire_check(job_wire_check_);
      record_check_cost(*check_cost_, s);
      check_cost_->reset();
    }
    const auto reports = pipeline_->collect_reports();
    const auto& mine = reports.front().times;
    s.time_forward_s = mine.forward_s;
    s.time_backward_s = mine.backward_s;
    s.time_comm_s = mine.recv_wait_s + mine.send_wait_s + mine.encode_s + mine.decode_s;
    const metrics::Row extra = pp::summarize(reports, pipeline_->config().micro_batches);
    for (const auto& [key, value] : extra.items())
      s.extra[key] = value;
    const auto tuned = pipeline_->auto_rows();
    if (!tuned.empty()) s.extra[metrics::key::kAutoLinks] = tuned;
  }

  void finish() override { pipeline_->stop(); }

  torch::nn::Sequential& checkpoint_module() override { return local_; }

  std::string layout() const override { return pipeline_->layout(); }

  void announce_checkpoint(const Position& at) override {
    pipeline_->announce_checkpoint(at.epoch, at.step);
  }

 private:
  std::unique_ptr<pp::Pipeline> pipeline_;
  torch::nn::Sequential local_;
  std::optional<metrics::AlternatingCost> check_cost_;  // --measure-wire-check
  const bool job_wire_check_;
};

// Block weights for the partition: measured forward+backward time (rank 0 measures on its
// own device, all ranks use its numbers) or parameter counts.
std::vector<double> block_weights(comm::Group& group, torch::nn::Sequential& model,
                                  const PipelineSetup& setup) {
  const TrainConfig& c = setup.config;
  std::vector<double> w;
  if (!c.parallel.pipeline.balance_auto) {
    for (const auto& block : model->children())
      w.push_back(static_cast<double>(models::parameter_count(*block)));
    return w;
  }
  auto t = at::zeros({static_cast<int64_t>(model->size())}, at::kDouble);
  if (group.rank() == 0) {
    const data::Dataset& train_set = *setup.train_set;
    const int64_t n = std::max<int64_t>(
        1, std::min(train_set.size(), c.batch_size / std::max(1, c.parallel.pipeline.chunks)));
    at::Generator gen = at::detail::createCPUGenerator(c.seed);
    // Timed where rank 0 computes (a GPU run on its GPU); the model goes back to the CPU,
    // where the partition takes its blocks from.
    const c10::Device device = c.client_device.value_or(c.device);
    const at::Tensor x =
        data::make_batch(train_set.images.narrow(0, 0, n), setup.norm, {}, gen).to(device);
    const models::AttentionMaskScope scope(
        train_set.masks.defined() ? train_set.masks.narrow(0, 0, n).to(device) : at::Tensor());
    model->to(device);
    const auto times = pp::measure_block_times(model, x, 3);
    model->zero_grad();
    model->to(at::kCPU);
    for (size_t i = 0; i < times.size(); ++i)
      t[static_cast<int64_t>(i)] = times[i];
  }
  group.native_broadcast(t, 0);
  for (int64_t i = 0; i < t.numel(); ++i)
    w.push_back(t[i].item<double>());
  return w;
}

pp::PipelineConfig pipeline_config(const PipelineSetup& setup, int rank, int ranks, int64_t blocks,
                                   const std::vector<double>& weights, int64_t train_samples) {
  const TrainConfig& c = setup.config;
  const auto& o = c.parallel.pipeline;
  pp::PipelineConfig pc;
  pc.partition = pp::make_partition(o.placement, ranks, blocks, o.balance, weights, o.client_first,
                                    o.client_last);
  pc.schedule = o.schedule;
  pc.micro_batches = o.chunks;
  pc.codecs.activations = o.activation_codec;
  pc.codecs.gradients = o.gradient_codec.value_or(o.activation_codec);
  pc.codecs.all_edges = o.compress_all_edges;
  pc.auto_compress = o.auto_compress;
  pc.loss = models::make_loss(c.loss);
  pc.device = rank == 0 ? c.client_device.value_or(c.device) : c.device;
  pc.memory_format = c.memory_format;
  if (models::takes_tokens(setup.model)) pc.mask_length = setup.model.input_shape.at(0);
  if (o.delta) {
    pp::DeltaOptions d;
    d.warmup = o.delta_warmup;
    d.sample_input = models::sample_input(setup.model, 1);
    d.samples = train_samples;
    d.dtype = o.delta_cache_dtype;
    d.limit_bytes = o.delta_cache_mb << 20;
    pc.delta = d;
  }
  return pc;
}

// A follower: run rank 0's commands, stepping this rank's optimizer after each training
// step and saving its checkpoint shard when told, until rank 0 says stop.
void follow(pp::Pipeline& pipeline, torch::optim::Optimizer& optimizer, Checkpointer* checkpointer,
            torch::nn::Sequential& local) {
  for (;;) {
    const pp::Command cmd = pipeline.next_command();
    if (cmd.kind == pp::CommandKind::kStop) return;
    if (cmd.kind == pp::CommandKind::kCheckpoint) {
      if (checkpointer == nullptr)
        throw std::runtime_error(pipeline.layout() +
                                 ": rank 0 checkpoints, this rank has no "
                                 "--checkpoint-dir");
      Position at;
      at.epoch = cmd.epoch;
      at.step = cmd.step;
      checkpointer->save(at, {local, optimizer});
    } else if (cmd.kind == pp::CommandKind::kTrain) {
      set_learning_rate(optimizer, cmd.lr);
      optimizer.zero_grad();
      pipeline.execute(cmd);
      const metrics::trace::Span span("compute", "optimizer step");
      optimizer.step();
    } else {
      pipeline.execute(cmd);
    }
  }
}

}  // namespace

std::unique_ptr<Engine> make_pipeline_engine(comm::Group& group, torch::nn::Sequential& model,
                                             const PipelineSetup& setup) {
  const auto weights = block_weights(group, model, setup);
  // Delta coding's caches are indexed by sample: every rank learns how many there are.
  at::Tensor train_samples = at::zeros({1}, at::kLong);
  if (group.rank() == 0) train_samples[0] = setup.train_set->size();
  group.native_broadcast(train_samples, 0);
  auto pipeline = std::make_unique<pp::Pipeline>(
      group, model,
      pipeline_config(setup, group.rank(), group.size(), static_cast<int64_t>(model->size()),
                      weights, train_samples[0].item<int64_t>()));
  model = torch::nn::Sequential(nullptr);  // keep only this rank's blocks alive
  if (group.rank() == 0) {
    return std::make_unique<PipelineEngine>(
        std::move(pipeline), setup.config.parallel.pipeline.measure_wire_check, group.wire_check());
  }
  const TrainConfig& c = setup.config;
  auto optimizer = make_optimizer(c.optim, pipeline->parameters());
  torch::nn::Sequential local = stages_module(*pipeline);
  std::optional<Checkpointer> checkpointer;
  if (!c.checkpoint_dir.empty()) {
    checkpointer.emplace(c.checkpoint_dir, &group, pipeline->layout(), setup.parameters);
    if (c.resume) checkpointer->restore({local, *optimizer});
  }
  follow(*pipeline, *optimizer, checkpointer ? &*checkpointer : nullptr, local);
  return nullptr;
}

void share_model_shape(comm::Group& group, models::ModelConfig& mc, bool failed) {
  ModelShape shape = ModelShape::of(mc);
  shape.loaded = !failed;
  at::Tensor message = shape.to_message();
  group.native_broadcast(message, 0);
  if (group.rank() == 0) return;
  const ModelShape from_rank0 = ModelShape::from_message(message, "rank 0");
  if (!from_rank0.loaded)
    throw std::runtime_error(group.describe() + ": rank 0 could not load the data (see its error)");
  from_rank0.apply_to(mc);
}

}  // namespace dtrain::train
