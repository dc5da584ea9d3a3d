// The driver/follower side of the pipeline: rank 0 turns each call (a training or
// evaluation mini-batch, a report, a checkpoint, a wire-check switch, stop) into a command
// for every follower (command.h) and runs its own part; a follower runs what each command
// asks for. The step itself runs in pipeline.cpp.
#include "dtrain/comm/group.h"
#include "dtrain/metrics/cuda_memory.h"
#include "dtrain/metrics/memory.h"
#include "dtrain/metrics/timer.h"
#include "dtrain/parallel/pipeline/link_tuner.h"
#include "dtrain/parallel/pipeline/pipeline.h"

namespace dtrain::parallel::pipeline {

Command Pipeline::next_command() {
  return wire_->receive_command();
}

void Pipeline::execute(const Command& c) {
  switch (c.kind) {
    case CommandKind::kTrain:
    case CommandKind::kEval:
      run(c.kind == CommandKind::kTrain, c.batch, {}, {}, {}, {});
      break;
    case CommandKind::kReport:
      wire_->send_report(local_report());
      wire_->reset_counters();
      break;
    case CommandKind::kCalibrate:
      if (!tuner_)
        throw std::runtime_error(group_.describe() + ": calibrate without --compress auto");
      tuner_->calibrate_as_follower(last_step_compute_s_);
      break;
    case CommandKind::kSetCodecs:
      if (!tuner_)
        throw std::runtime_error(group_.describe() + ": link codecs without --compress auto");
      tuner_->receive_codecs();
      break;
    case CommandKind::kWireCheck:
      group_.set_wire_check(c.wire_check);
      break;
    case CommandKind::kStop:
    case CommandKind::kCheckpoint:  // the caller's: it owns the optimizer (follow())
      break;
  }
}

StepResult Pipeline::train_batch(const at::Tensor& inputs, const at::Tensor& labels,
                                 const at::Tensor& mask, double lr, const at::Tensor& ids) {
  check_mask(inputs.size(0), mask);
  if (config_.delta) check_ids(inputs.size(0), ids);
  if (tuner_) tuner_->before_step();
  const auto start = metrics::Clock::now();
  wire_->send_command({CommandKind::kTrain, inputs.size(0), lr});
  const StepResult result = run(true, inputs.size(0), inputs, labels, mask, ids);
  if (tuner_) tuner_->after_step(metrics::since(start), inputs.size(0));
  // The second step of an epoch: the first may carry warm-up (allocator, kernels' setup).
  if (tuner_ && calibrate_due_ && wire_->times().steps >= 2) {
    wire_->send_command({CommandKind::kCalibrate, 0, 0});
    tuner_->calibrate_as_driver(last_step_compute_s_, config_.micro_batches);
    calibrate_due_ = false;
  }
  return result;
}

std::vector<metrics::Row> Pipeline::auto_rows() const {
  return tuner_ ? tuner_->rows() : std::vector<metrics::Row>{};
}

StepResult Pipeline::eval_batch(const at::Tensor& inputs, const at::Tensor& labels,
                                const at::Tensor& mask) {
  check_mask(inputs.size(0), mask);
  if (tuner_) tuner_->end_epoch();  // evaluation ends training's part of the epoch
  wire_->send_command({CommandKind::kEval, inputs.size(0), 0});
  return run(false, inputs.size(0), inputs, labels, mask, {});
}

void Pipeline::announce_checkpoint(int64_t epoch, int64_t step) {
  wire_->send_command({CommandKind::kCheckpoint, 0, 0, epoch, step});
}

void Pipeline::set_wire_check(bool on) {
  if (group_.wire_check() == on) return;
  Command command;
  command.kind = CommandKind::kWireCheck;
  command.wire_check = on;
  wire_->send_command(command);
  wire_->wait_sends();
  group_.set_wire_check(on);
}

void Pipeline::stop() {
  wire_->send_command({CommandKind::kStop, 0, 0});
  wire_->wait_sends();
}

RankReport Pipeline::local_report() const {
  RankReport r;
  r.rank = group_.rank();
  r.blocks = block_names_;
  r.times = wire_->times();
  r.links = wire_->links();
  r.peak_rss_bytes = metrics::peak_rss_bytes();
  const metrics::CudaMemory gpu = metrics::cuda_memory(config_.device);
  r.cuda_max_allocated_bytes = gpu.max_allocated_bytes;
  r.cuda_max_reserved_bytes = gpu.max_reserved_bytes;
  return r;
}

std::vector<RankReport> Pipeline::collect_reports() {
  calibrate_due_ = true;  // a report closes an epoch: re-check the links in the next one
  if (tuner_) tuner_->end_epoch();
  wire_->send_command({CommandKind::kReport, 0, 0});
  wire_->wait_sends();
  std::vector<RankReport> out{local_report()};
  wire_->reset_counters();
  for (int r = 1; r < group_.size(); ++r)
    out.push_back(wire_->receive_report(r));
  return out;
}

}  // namespace dtrain::parallel::pipeline
