#include "dtrain/parallel/pipeline/pipeline.h"

#include <torch/torch.h>

#include <chrono>
#include <functional>

#include "dtrain/base/device.h"
#include "dtrain/comm/agreement.h"
#include "dtrain/comm/group.h"
#include "dtrain/metrics/timer.h"
#include "dtrain/metrics/trace.h"
#include "dtrain/models/batch_context.h"
#include "dtrain/models/registry.h"
#include "dtrain/parallel/pipeline/pipeline_step.h"

namespace dtrain::parallel::pipeline {
namespace {

using metrics::Clock;
using metrics::since;

std::vector<int64_t> split_sizes(int64_t batch, int parts) {
  std::vector<int64_t> sizes(static_cast<size_t>(parts), batch / parts);
  for (int64_t i = 0; i < batch % parts; ++i)
    ++sizes[static_cast<size_t>(i)];
  return sizes;
}

std::vector<at::Tensor> split_rows(const at::Tensor& t, const std::vector<int64_t>& sizes) {
  std::vector<at::Tensor> out;
  int64_t begin = 0;
  for (const int64_t n : sizes) {
    out.push_back(t.narrow(0, begin, n));
    begin += n;
  }
  return out;
}

std::string settings_text(const PipelineConfig& c, int64_t blocks, int64_t parameters) {
  std::string text = std::to_string(blocks) + "/" + std::to_string(parameters) + "/" + c.schedule +
                     "/" + std::to_string(c.micro_batches) + "/" + to_string(c.codecs.activations) +
                     "/" + to_string(c.codecs.gradients) + "/" +
                     std::to_string(c.codecs.all_edges) + "/mask:" + std::to_string(c.mask_length);
  if (c.delta)
    text += "/delta:" + to_string(c.delta->warmup) + ":" + std::to_string(c.delta->samples) + ":" +
            std::to_string(static_cast<int>(c.delta->dtype)) + ":" +
            std::to_string(c.delta->limit_bytes);
  if (c.auto_compress) {
    text += "/auto:" + std::to_string(c.auto_compress->min_bits);
    for (const auto& spec : c.auto_compress->candidates)
      text += "," + to_string(spec);
  }
  for (const auto& s : c.partition.stages)
    text +=
        "/" + std::to_string(s.rank) + ":" + std::to_string(s.begin) + "-" + std::to_string(s.end);
  return text;
}

}  // namespace

Pipeline::Pipeline(comm::Group& group, torch::nn::Sequential model, PipelineConfig config)
    : group_(group), config_(std::move(config)) {
  stage_rank_ = config_.partition.stage_ranks();
  const int64_t blocks = static_cast<int64_t>(model->size());
  const int64_t max_micro_batches = StageTransport::max_micro_batches();
  if (config_.micro_batches < 1 || config_.micro_batches > max_micro_batches)
    throw std::invalid_argument("--chunks must be 1.." + std::to_string(max_micro_batches));
  const int64_t stage_limit = StageTransport::max_stages();
  if (static_cast<int64_t>(config_.partition.stages.size()) > stage_limit)
    throw std::invalid_argument("a pipeline has at most " + std::to_string(stage_limit) +
                                " stages, got " + std::to_string(config_.partition.stages.size()));
  int64_t covered = 0;
  for (const auto& s : config_.partition.stages) {
    if (s.begin != covered || s.end <= s.begin || s.end > blocks)
      throw std::invalid_argument("pipeline partition does not cover the model's " +
                                  std::to_string(blocks) + " blocks in order");
    covered = s.end;
  }
  if (covered != blocks)
    throw std::invalid_argument("pipeline partition covers " + std::to_string(covered) + " of " +
                                std::to_string(blocks) + " blocks");
  // Validates the placement against the world (every rank has a stage) up front.
  schedule_for(true, config_.micro_batches);

  wire_ = std::make_unique<StageTransport>(group_, stage_rank_, config_.codecs);
  if (config_.auto_compress)
    tuner_ = std::make_unique<LinkTuner>(*wire_, stage_rank_, *config_.auto_compress);

  const auto& names = model->named_children();
  for (size_t v = 0; v < config_.partition.stages.size(); ++v) {
    const auto& s = config_.partition.stages[v];
    if (s.rank != group_.rank()) continue;
    torch::nn::Sequential part;
    for (int64_t b = s.begin; b < s.end; ++b) {
      part->push_back(names[static_cast<size_t>(b)].key(),
                      model->begin()[static_cast<std::ptrdiff_t>(b)]);
      block_names_.push_back(names[static_cast<size_t>(b)].key());
    }
    models::place(*part, config_.device, config_.memory_format);
    my_stages_.push_back(static_cast<int>(v));
    modules_.push_back(part);
  }

  check_agreement(blocks, models::parameter_count(*model));
  if (config_.delta) make_delta_caches(model);
}

// Every rank must agree, so mismatched flags fail on every rank instead of hanging.
void Pipeline::check_agreement(int64_t blocks, int64_t parameters) {
  if (!comm::same_on_all_ranks(group_, settings_text(config_, blocks, parameters))) {
    throw std::invalid_argument(group_.describe() +
                                ": the ranks disagree on the pipeline (model, partition, "
                                "schedule, chunks or codecs differ between ranks)");
  }
}

std::string Pipeline::layout() const {
  std::string text = "a pipeline over " + std::to_string(group_.size()) + " ranks, stages";
  for (const auto& s : config_.partition.stages)
    text += " [" + std::to_string(s.begin) + "," + std::to_string(s.end) + ")@" +
            std::to_string(s.rank);
  return text;
}

bool Pipeline::is_driver() const {
  return group_.rank() == 0;
}

std::vector<at::Tensor> Pipeline::parameters() const {
  std::vector<at::Tensor> out;
  for (const auto& m : modules_)
    for (const auto& p : m->parameters())
      out.push_back(p);
  return out;
}

int Pipeline::micro_batches_for(int64_t batch) const {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(config_.micro_batches, batch)));
}

const Schedule& Pipeline::schedule_for(bool training, int micro_batches) {
  const auto key = std::make_pair(training, micro_batches);
  auto it = schedules_.find(key);
  if (it == schedules_.end()) {
    Schedule s = training
                     ? make_schedule(config_.schedule, stage_rank_, group_.size(), micro_batches)
                     : make_forward_schedule(stage_rank_, group_.size(), micro_batches);
    verify(s);
    it = schedules_.emplace(key, std::move(s)).first;
  }
  return it->second;
}

// Before any command goes out: a follower told to run a step waits for its tensors.
void Pipeline::check_mask(int64_t batch, const at::Tensor& mask) const {
  if (config_.mask_length == 0) return;
  if (!mask.defined() || mask.dim() != 2 || mask.size(0) != batch ||
      mask.size(1) != config_.mask_length)
    throw std::invalid_argument("pipeline: a text batch needs its attention mask [" +
                                std::to_string(batch) + ", " + std::to_string(config_.mask_length) +
                                "]");
}

StepResult Pipeline::run(bool training, int64_t batch, const at::Tensor& inputs,
                         const at::Tensor& labels, const at::Tensor& mask, const at::Tensor& ids) {
  const auto step_start = Clock::now();
  // One step's window on every rank: the report draws a step of the pipeline from it.
  const metrics::trace::Span step_span("step", training ? "train step" : "eval step");
  const double compute_before = wire_->times().forward_s + wire_->times().backward_s;
  wire_->set_counting(training);
  Step step;
  step.training = training;
  step.batch = batch;
  const int m = micro_batches_for(batch);
  step.sizes = split_sizes(batch, m);
  step.schedule = &schedule_for(training, m);
  step.last_stage = step.schedule->stages() - 1;
  step.loss_rank = stage_rank_[static_cast<size_t>(step.last_stage)];
  if (group_.rank() == 0) {
    step.input_chunks = split_rows(inputs, step.sizes);
    step.label_chunks = split_rows(labels.contiguous(), step.sizes);
    if (config_.mask_length > 0) {
      step.mask_chunks = split_rows(mask.to(at::kCPU, at::kByte).contiguous(), step.sizes);
    }
    route_driver_data(step);
  } else {
    post_driver_data(step);
  }
  if (config_.delta && training) step.id_chunks = split_rows(share_ids(step, ids), step.sizes);
  for (auto& module : modules_)
    module->train(training);
  torch::AutoGradMode grad_mode(training);
  const auto& ops = step.schedule->by_rank[static_cast<size_t>(group_.rank())];
  for (size_t i = 0; i < ops.size(); ++i) {
    post_receives(step, ops, i);
    if (ops[i].kind == OpKind::kForward)
      forward(step, ops[i]);
    else
      backward(step, ops[i]);
  }
  gather_result(step);
  wire_->wait_sends();
  if (training) {
    wire_->times().step_s += since(step_start);
    wire_->times().steps += 1;
    last_step_compute_s_ = wire_->times().forward_s + wire_->times().backward_s - compute_before;
  }
  wire_->set_counting(false);
  return step.result;
}

// The linear chain computes the loss on the last rank: the driver sends it the labels. Text
// batches: every other rank runs a forward, and gets the attention mask.
void Pipeline::route_driver_data(Step& step) {
  using Data = StageTransport::DriverData;
  for (size_t mb = 0; mb < step.label_chunks.size(); ++mb) {
    const int micro_batch = static_cast<int>(mb);
    if (step.loss_rank != 0)
      wire_->send_driver_data(Data::kLabels, step.label_chunks[mb], step.loss_rank, micro_batch);
    if (config_.mask_length > 0)
      for (int r = 1; r < group_.size(); ++r)
        wire_->send_driver_data(Data::kMask, step.mask_chunks[mb], r, micro_batch);
  }
}

// A forward's attention mask: the driver's own chunk, or the one it sent this rank (taken
// once per micro-batch, by its first forward here, and kept for later stages).
at::Tensor Pipeline::mask_of(Step& step, int micro_batch) {
  if (config_.mask_length == 0) return {};
  const auto mb = static_cast<size_t>(micro_batch);
  if (group_.rank() == 0) return step.mask_chunks[mb];
  auto& kept = step.received_masks;
  if (auto it = kept.find(micro_batch); it != kept.end()) return it->second;
  return kept[micro_batch] = wire_->receive_driver_data(StageTransport::DriverData::kMask,
                                                        {step.sizes[mb], config_.mask_length},
                                                        at::kByte, micro_batch);
}

// The tensor `op` receives: a forward its stage's input from the stage before, a backward
// the gradient of its output from the stage after; none for the first forward and the last
// backward. The one definition both posting ahead and receiving use.
std::optional<Transfer> Pipeline::input_of(const Step& step, const Op& op) const {
  const int64_t samples = step.sizes[static_cast<size_t>(op.micro_batch)];
  if (op.kind == OpKind::kForward && op.stage > 0) {
    Transfer t{op.stage - 1, op.stage, op.micro_batch, false, samples};
    t.codec = codec_override(step, t);
    return t;
  }
  if (op.kind == OpKind::kBackward && op.stage < step.last_stage)
    return Transfer{op.stage + 1, op.stage, op.micro_batch, true, samples};
  return std::nullopt;
}

// The inputs of the next few ops: a packet then moves as soon as its sender has it. A window,
// not the whole step, so 1F1B's bound on live micro-batches also bounds receive buffers.
void Pipeline::post_receives(const Step& step, const std::vector<Op>& ops, size_t next) {
  constexpr size_t kOpsAheadPerStage = 4;
  const size_t end = std::min(ops.size(), next + kOpsAheadPerStage * my_stages_.size());
  for (size_t i = next; i < end; ++i) {
    if (const auto input = input_of(step, ops[i])) wire_->expect_tensor(*input);
  }
}

// Followers post every receive of the driver's per-micro-batch data (small) when the step
// starts. The driver sends them all at its start, before most would otherwise be posted: Gloo
// then moves each only when the driver's I/O thread answers the late receive, which on busy
// cores waits for the driver to block (a label posted 4 ops ahead arrived 1.5-3 ms late).
void Pipeline::post_driver_data(const Step& step) {
  using Data = StageTransport::DriverData;
  const auto& ops = step.schedule->by_rank[static_cast<size_t>(group_.rank())];
  for (const Op& op : ops) {
    if (op.kind != OpKind::kForward) continue;
    const int64_t samples = step.sizes[static_cast<size_t>(op.micro_batch)];
    if (op.stage == step.last_stage)
      wire_->expect_driver_data(Data::kLabels, {samples}, at::kLong, op.micro_batch);
    if (config_.mask_length > 0)
      wire_->expect_driver_data(Data::kMask, {samples, config_.mask_length}, at::kByte,
                                op.micro_batch);
  }
}

size_t Pipeline::local_index(int stage) const {
  return static_cast<size_t>(std::find(my_stages_.begin(), my_stages_.end(), stage) -
                             my_stages_.begin());
}

void Pipeline::forward(Step& step, const Op& op) {
  const auto mb = static_cast<size_t>(op.micro_batch);
  const bool last = op.stage == step.last_stage;
  const int64_t samples = step.sizes[mb];
  Live l;
  const c10::Device& device = config_.device;
  const auto input = input_of(step, op);
  l.input = input ? wire_->receive_tensor(*input, device) : step.input_chunks[mb].to(device);
  if (input && step.training && delta_coded(*input))
    l.input = delta_received(step, *input, std::move(l.input));
  if (step.training && op.stage > 0) l.input.requires_grad_(true);
  at::Tensor y;
  if (last)
    y = (group_.rank() == 0 ? step.label_chunks[mb]
                            : wire_->receive_driver_data(StageTransport::DriverData::kLabels,
                                                         {samples}, at::kLong, op.micro_batch))
            .to(device);
  const at::Tensor mask = mask_of(step, op.micro_batch);
  const auto t0 = Clock::now();
  {
    const models::AttentionMaskScope scope(mask.defined() ? mask.to(device) : mask);
    l.output = modules_[local_index(op.stage)]->forward(l.input);
  }
  if (last) {
    const double b = static_cast<double>(step.batch);
    l.loss = config_.loss(l.output, y) / b;
    step.result.loss_sum += l.loss.item<double>() * b;
    step.result.correct += l.output.argmax(1).eq(y).sum().item<int64_t>();
    step.result.samples += y.size(0);
    const auto counts = models::count_confusion(l.output, y);
    for (size_t i = 0; i < counts.size(); ++i)
      step.result.confusion[i] += counts[i];
  }
  synchronize(device);
  const double forward_s = metrics::trace::span_since(
      "compute", step.training ? "forward" : "eval forward", t0, op.micro_batch, "micro-batch");
  if (wire_->counting()) wire_->times().forward_s += forward_s;
  if (!last)
    send_activation(step, l.output, {op.stage, op.stage + 1, op.micro_batch, false, samples});
  if (step.training) step.live[{op.stage, op.micro_batch}] = std::move(l);
}

void Pipeline::backward(Step& step, const Op& op) {
  auto it = step.live.find({op.stage, op.micro_batch});
  Live& l = it->second;
  const bool last = op.stage == step.last_stage;
  const int64_t samples = step.sizes[static_cast<size_t>(op.micro_batch)];
  at::Tensor grad;
  if (const auto input = input_of(step, op)) grad = wire_->receive_tensor(*input, config_.device);
  const auto t0 = Clock::now();
  // A parameter-free first stage (a flatten) has nothing to differentiate.
  if (last && l.loss.requires_grad())
    l.loss.backward();
  else if (!last && l.output.requires_grad())
    l.output.backward(grad);
  synchronize(config_.device);
  const double backward_s =
      metrics::trace::span_since("compute", "backward", t0, op.micro_batch, "micro-batch");
  if (wire_->counting()) wire_->times().backward_s += backward_s;
  if (op.stage > 0)
    wire_->send_tensor(l.input.grad(), {op.stage, op.stage - 1, op.micro_batch, true, samples});
  step.live.erase(it);
}

// The linear chain's last stage reports loss and accuracy to the driver.
void Pipeline::gather_result(Step& step) {
  if (step.loss_rank == 0) return;
  if (group_.rank() == step.loss_rank)
    wire_->send_result(step.result);
  else if (group_.rank() == 0)
    step.result = wire_->receive_result(step.loss_rank);
}

}  // namespace dtrain::parallel::pipeline
