// What a training run is, as typed values: the CLI parses every flag once into these
// (enums and codec specs, never strings), and the trainer and engines read them as they
// are. validate() checks what types cannot (ranges, combinations).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <c10/core/Device.h>

#include "dtrain/comm/allreduce.h"
#include "dtrain/compress/codec.h"
#include "dtrain/data/dataset.h"
#include "dtrain/models/loss.h"
#include "dtrain/models/memory_format.h"
#include "dtrain/models/registry.h"
#include "dtrain/parallel/auto_codec.h"
#include "dtrain/parallel/diloco.h"
#include "dtrain/parallel/pipeline/partition.h"
#include "dtrain/parallel/pipeline/schedule.h"

namespace dtrain::train {

enum class OptimizerKind { kSgd, kAdam, kAdamW };
enum class LrSchedule { kConstant, kStep, kCosine, kLinear };
enum class ParallelMode { kNone, kPipeline, kDdp, kDiloco };

OptimizerKind parse_optimizer(const std::string& name);  // sgd | adam | adamw
std::string to_string(OptimizerKind kind);
LrSchedule parse_lr_schedule(const std::string& name);  // constant | step | cosine | linear
std::string to_string(LrSchedule schedule);
ParallelMode parse_parallel_mode(const std::string& name);  // none | pipeline | ddp | diloco
std::string to_string(ParallelMode mode);

struct OptimConfig {
  OptimizerKind kind = OptimizerKind::kSgd;
  double lr = 0.05;
  double momentum = 0.9;
  double weight_decay = 5e-4;
  bool nesterov = false;
  LrSchedule schedule = LrSchedule::kCosine;
  double warmup_epochs = 0;
  int64_t step_size = 30;  // epochs between decays (step)
  double gamma = 0.1;
};

struct PipelineOptions {
  parallel::pipeline::Placement placement = parallel::pipeline::Placement::kLinear;
  std::vector<int64_t> balance;  // blocks per stage (per server for ushape); empty: weights
  bool balance_auto = false;     // weights = measured forward+backward time per block
  int64_t client_first = 1, client_last = 1;
  std::string schedule = "gpipe";  // parallel/pipeline/schedule.h's table
  int chunks = 4;
  compress::CodecSpec activation_codec;               // default: none
  std::optional<compress::CodecSpec> gradient_codec;  // empty: same as activations
  bool compress_all_edges = false;                    // false: only links touching rank 0
  // --compress auto: the codec of each compressed link chosen per epoch from these.
  std::optional<parallel::AutoCompress> auto_compress;
  // --measure-wire-check: training steps alternate the wire check off and on (ABBA) and each
  // epoch reports its cost (metrics/alternating_cost.h); evaluation runs with the job's.
  bool measure_wire_check = false;
  // --delta: activations delta-coded against per-sample caches at both ends
  // (parallel/pipeline/delta_cache.h); the warm-up epoch and evaluation use delta_warmup.
  bool delta = false;
  compress::CodecSpec delta_warmup = compress::parse_codec("sortquant:8");
  int64_t delta_cache_mb = 8192;
  at::ScalarType delta_cache_dtype = at::kBFloat16;
};

struct DdpOptions {
  double bucket_mb = 25;
  comm::Algorithm algorithm = comm::Algorithm::kAuto;
  compress::CodecSpec gradient_codec;  // default: none (exact all-reduce)
  // --compress-grad auto: the gradient codec chosen per epoch from these.
  std::optional<parallel::AutoCompress> auto_compress;
  bool sync_bn = false;
};

// --elastic (docs/elastic.md): DiLoCo's replicas may die and join while the run goes on.
struct ElasticOptions {
  bool enabled = false;
  int min_replicas = 1;
  double heartbeat_timeout_s = 1.0;
  double connect_timeout_s = 10;
  bool mid_round_entry = true;  // joiners may enter while a round goes on (docs/elastic.md)
  std::string join;             // HOST:PORT of a `dtrain coordinator`; empty: MASTER_ADDR/PORT
  std::string fault_plan;       // tests only (elastic/fault_plan.h)
  std::string sample_log;       // tests only: JSON lines of the sample positions each round counted
};

struct ParallelConfig {
  ParallelMode mode = ParallelMode::kNone;
  PipelineOptions pipeline;
  DdpOptions ddp;
  parallel::DilocoConfig diloco;
  ElasticOptions elastic;
};

struct TrainConfig {
  models::ModelConfig model;
  data::DataConfig data;
  OptimConfig optim;
  models::LossKind loss = models::LossKind::kCrossEntropy;
  int64_t epochs = 1;
  int64_t batch_size = 64;       // per rank in DDP mode
  int64_t grad_accum_steps = 1;  // batches per optimizer step (DDP: communicate on the last)
  int64_t test_batch_size = 1000;
  uint64_t seed = 0;
  int64_t limit_train = 0;  // 0: all
  int64_t limit_test = 0;
  int64_t crop_padding = -1;  // -1: dataset default (4 for CIFAR-sized colour data, else 0)
  int flip = -1;              // -1: dataset default (off for digit-like data)
  std::string metrics_path;
  std::string step_log_path;  // --step-log: JSON lines of the step log (metrics/keys.h)
  int64_t log_every = 0;      // batches between step-log rows; 0: about 50 an epoch
  std::string command;        // the command line, written into every metrics row ("command")
  std::string checkpoint_dir;
  std::string weights_path;  // pretrained weights (safetensors) loaded before training
  bool resume = false;
  int64_t checkpoint_every = 0;  // also every N optimizer steps inside an epoch (0: epoch ends)
  int64_t stop_after = 0;        // run at most this many epochs now (0: to the end); resume later
  int64_t stop_after_steps = 0;  // or at most this many optimizer steps now
  bool progress = true;
  ParallelConfig parallel;
  // Where the model and its tensors live (every rank; pipeline: the servers). A pipeline's
  // rank 0 (the client) may use another device, e.g. a CPU client with GPU servers.
  c10::Device device{c10::kCPU};
  std::optional<c10::Device> client_device;
  // --memory-format: the layout of 4-D parameters and activations (models/memory_format.h).
  models::MemoryFormat memory_format = models::MemoryFormat::kAuto;
};

// Throws std::invalid_argument naming the flag. `has_group`: a process group was given.
void validate(const TrainConfig& config, bool has_group);

}  // namespace dtrain::train
