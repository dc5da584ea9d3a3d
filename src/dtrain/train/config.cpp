#include "dtrain/train/config.h"

#include <stdexcept>

#include "dtrain/base/names.h"

namespace dtrain::train {
namespace {

const EnumNames<OptimizerKind> kOptimizerNames("optimizer", {{OptimizerKind::kSgd, "sgd"},
                                                             {OptimizerKind::kAdam, "adam"},
                                                             {OptimizerKind::kAdamW, "adamw"}});
const EnumNames<LrSchedule> kLrScheduleNames("learning-rate schedule",
                                             {{LrSchedule::kConstant, "constant"},
                                              {LrSchedule::kStep, "step"},
                                              {LrSchedule::kCosine, "cosine"},
                                              {LrSchedule::kLinear, "linear"}});
const EnumNames<ParallelMode> kParallelNames("parallel mode",
                                             {{ParallelMode::kNone, "none"},
                                              {ParallelMode::kPipeline, "pipeline"},
                                              {ParallelMode::kDdp, "ddp"},
                                              {ParallelMode::kDiloco, "diloco"}});

}  // namespace

OptimizerKind parse_optimizer(const std::string& name) {
  return kOptimizerNames.parse(name);
}
std::string to_string(OptimizerKind kind) {
  return kOptimizerNames.to_string(kind);
}
LrSchedule parse_lr_schedule(const std::string& name) {
  return kLrScheduleNames.parse(name);
}
std::string to_string(LrSchedule schedule) {
  return kLrScheduleNames.to_string(schedule);
}
ParallelMode parse_parallel_mode(const std::string& name) {
  return kParallelNames.parse(name);
}
std::string to_string(ParallelMode mode) {
  return kParallelNames.to_string(mode);
}

void validate(const TrainConfig& c, bool has_group) {
  auto require = [](bool ok, const char* message) {
    if (!ok) throw std::invalid_argument(message);
  };
  require(c.epochs >= 1, "--epochs must be at least 1");
  require(c.batch_size >= 1, "--batch-size must be at least 1");
  require(c.test_batch_size >= 1, "--test-batch-size must be at least 1");
  require(c.optim.lr > 0, "--lr must be positive");
  require(!c.resume || !c.checkpoint_dir.empty(), "--resume needs --checkpoint-dir");
  require(c.grad_accum_steps >= 1, "--grad-accum-steps must be at least 1");
  require(c.checkpoint_every >= 0 && c.stop_after >= 0 && c.stop_after_steps >= 0,
          "--checkpoint-every, --stop-after and --stop-after-steps must not be negative");
  require(c.checkpoint_every == 0 || !c.checkpoint_dir.empty(),
          "--checkpoint-every needs --checkpoint-dir");
  const bool text = c.data.name == "glue";
  require(text == models::takes_tokens(c.model),
          text ? "--dataset glue is text: use --model roberta"
               : "--model roberta reads token ids: use --dataset glue");
  require(!text || c.data.max_seq_len >= 4, "--max-seq-len must be at least 4");
  const ParallelMode mode = c.parallel.mode;
  require(mode == ParallelMode::kNone || has_group,
          "--parallel pipeline, ddp and diloco need a process group");
  require(mode != ParallelMode::kDiloco || c.grad_accum_steps == 1,
          "--grad-accum-steps is not for --parallel diloco");
  require(mode == ParallelMode::kDdp || !c.parallel.ddp.sync_bn, "--sync-bn needs --parallel ddp");
  if (mode == ParallelMode::kDdp)
    require(c.parallel.ddp.bucket_mb > 0, "--bucket-mb must be positive");
  require(mode == ParallelMode::kPipeline || !c.client_device,
          "--client-device is for --parallel pipeline (rank 0's stages)");
  if (mode == ParallelMode::kPipeline) {
    require(c.grad_accum_steps == 1,
            "--grad-accum-steps: use --chunks to split batches in a pipeline");
  }
}

}  // namespace dtrain::train
