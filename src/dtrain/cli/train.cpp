// `dtrain train`: single-process or pipeline-parallel training (-n S --parallel pipeline).
#include <iostream>
#include <memory>

#include "dtrain/base/device.h"
#include "dtrain/base/names.h"
#include "dtrain/cli/commands.h"
#include "dtrain/cli/common.h"
#include "dtrain/cli/diloco_options.h"
#include "dtrain/cli/elastic_run.h"
#include "dtrain/cli/tracing.h"
#include "dtrain/comm/core_binding.h"
#include "dtrain/comm/group.h"
#include "dtrain/metrics/keys.h"
#include "dtrain/models/registry.h"
#include "dtrain/parallel/pipeline/report.h"
#include "dtrain/report/pipeline_timeline.h"
#include "dtrain/train/trainer.h"

namespace dtrain::cli {
namespace {

// What a run's own report draws: its epochs, the step log's curves and, where the run was
// traced with more than one rank, one pipeline step per rank.
std::vector<metrics::Row> run_report_rows(std::vector<metrics::Row> rows,
                                          const std::vector<train::EpochStats>& history,
                                          const nlohmann::json& trace_events) {
  for (const auto& h : history)
    rows.insert(rows.end(), h.steps.begin(), h.steps.end());
  if (auto timeline = report::pipeline_step_timeline(trace_events)) {
    (*timeline)[metrics::key::kCommand] = command_line();
    rows.push_back(std::move(*timeline));
  }
  return rows;
}

// "none,fp16,sortquant:9:3,sortquant:6:2": codec specs as a flag spells them.
std::string names_of(const std::vector<compress::CodecSpec>& specs) {
  std::string out;
  for (const auto& spec : specs)
    out += (out.empty() ? "" : ",") + to_string(spec);
  return out;
}

struct TrainOptions {
  train::TrainConfig config;
  std::string input_shape = "1,28,28";
  std::string trace_path;
  Output output;
  bool no_progress = false;
  bool quiet = false;
  int threads = 0;
  RankFlags ranks;
  std::string balance;
  std::string client_blocks = "1,1";
  std::optional<compress::CodecSpec> compress_grad;  // pipeline gradients or DDP's codec
  bool compress_auto = false, compress_grad_auto = false;
  std::string compress_candidates = names_of(parallel::default_auto_candidates());
  int compress_min_bits = 0;  // 0: the default of the auto that reads it (auto_options)
  double compress_runoff = parallel::AutoCompress{}.runoff_window;
  bool compress_outer_auto = false;
  ElasticFlags elastic;
};

const EnumNames<bool> kEdgeNames("edge set", {{false, "client"}, {true, "all"}});
const EnumNames<at::ScalarType> kCacheDtypes("cache dtype", {{at::kFloat, "float32"},
                                                             {at::kBFloat16, "bfloat16"},
                                                             {at::kHalf, "float16"}});

std::vector<int64_t> parse_shape(const std::string& text) {
  std::vector<int64_t> out;
  for (int v : parse_int_list(text, "--input-shape"))
    out.push_back(v);
  if (out.size() != 3) throw std::invalid_argument("--input-shape takes C,H,W");
  return out;
}

// --compress-candidates and --compress-min-bits (`default_min_bits` where not given),
// checked here so a bad list fails before any rank starts.
constexpr int kMinBits = 8, kOuterMinBits = 2;
parallel::AutoCompress auto_options(const TrainOptions& o, int default_min_bits) {
  parallel::AutoCompress a;
  for (const auto& name : split_list(o.compress_candidates)) {
    try {
      a.candidates.push_back(compress::parse_codec(name));
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(std::string("--compress-candidates: ") + e.what());
    }
  }
  a.min_bits = o.compress_min_bits > 0 ? o.compress_min_bits : default_min_bits;
  a.runoff_window = o.compress_runoff;
  parallel::eligible_candidates(a);
  return a;
}

}  // namespace

void register_train(CLI::App& parent, int& exit_code) {
  auto o = std::make_shared<TrainOptions>();
  auto& c = o->config;
  c.model.name = "cnn";
  c.epochs = 10;
  c.batch_size = 64;
  c.optim.lr = 0.05;
  CLI::App* sub = parent.add_subcommand(
      "train",
      "train a model from the zoo on a dataset: one process, or a pipeline over -n ranks; "
      "per-epoch table, JSON lines with --metrics");
  sub->add_option("--model", c.model.name, models::model_names() + " (see `dtrain models`)")
      ->capture_default_str();
  add_transformer_flags(sub, c.model.transformer);
  sub->add_option("--weights", c.weights_path,
                  "pretrained weights (safetensors; Hugging Face's names for roberta), loaded "
                  "before training; missing and unexpected names are listed");
  sub->add_option("--width", c.model.width, "width multiplier")->capture_default_str();
  sub->add_option("--depth", c.model.depth, "mlp: hidden layers")->capture_default_str();
  sub->add_option("--dataset", c.data.name,
                  "fashion-mnist, mnist, cifar10, cifar100, synthetic, glue (text: --task)")
      ->capture_default_str();
  sub->add_option("--task", c.data.task, "glue: rte or cola (train.tsv, dev.tsv in --data-dir)");
  sub->add_option("--tokenizer-dir", c.data.tokenizer_dir,
                  "glue: vocab.json and merges.txt of a byte-level BPE (default: --data-dir)");
  sub->add_option("--max-seq-len", c.data.max_seq_len, "glue: tokens per example (padded)")
      ->capture_default_str();
  sub->add_option("--data-dir", c.data.data_dir,
                  "dataset folder (default: /usr/share/datasets/fashion-mnist for fashion-mnist, "
                  "data/NAME otherwise)");
  sub->add_option("--input-shape", o->input_shape, "synthetic data: C,H,W")->capture_default_str();
  sub->add_option("--num-classes", c.data.num_classes, "synthetic data: classes")
      ->capture_default_str();
  sub->add_option("--synthetic-size", c.data.synthetic_size,
                  "synthetic data: training samples (test: a fifth)")
      ->capture_default_str();
  sub->add_option("--epochs", c.epochs, "epochs")->capture_default_str();
  sub->add_option("--batch-size", c.batch_size, "mini-batch size")->capture_default_str();
  sub->add_option("--test-batch-size", c.test_batch_size, "evaluation batch size")
      ->capture_default_str();
  add_typed_option(sub, "--optimizer", c.optim.kind, train::parse_optimizer, "sgd, adam or adamw");
  sub->add_option("--lr", c.optim.lr, "peak learning rate")->capture_default_str();
  sub->add_option("--momentum", c.optim.momentum, "SGD momentum")->capture_default_str();
  sub->add_option("--weight-decay", c.optim.weight_decay, "L2 weight decay")->capture_default_str();
  sub->add_flag("--nesterov", c.optim.nesterov, "Nesterov momentum");
  add_typed_option(sub, "--lr-schedule", c.optim.schedule, train::parse_lr_schedule,
                   "learning-rate schedule: constant, step, cosine or linear (decay to 0)");
  sub->add_option("--warmup-epochs", c.optim.warmup_epochs, "linear warm-up, in epochs")
      ->capture_default_str();
  sub->add_option("--step-size", c.optim.step_size, "step schedule: epochs per decay")
      ->capture_default_str();
  sub->add_option("--gamma", c.optim.gamma, "step schedule: decay factor")->capture_default_str();
  sub->add_option("--crop-padding", c.crop_padding,
                  "random crop padding (default: 4 for 32x32 colour data, else off)");
  sub->add_option("--flip", c.flip,
                  "random horizontal flip 0/1 (default: on for colour data, off for digits)");
  sub->add_option("--seed", c.seed, "seed: same seed and threads, same run")->capture_default_str();
  sub->add_option("--limit-train", c.limit_train, "use only the first N training samples");
  sub->add_option("--limit-test", c.limit_test, "use only the first N test samples");
  sub->add_option("--metrics", c.metrics_path,
                  "write JSON lines: one object per epoch and a summary");
  sub->add_option("--step-log", c.step_log_path,
                  "write JSON lines of the step log: loss, accuracy and samples/s of rank 0's "
                  "batches every --log-every batches, with the time since the start");
  sub->add_option("--log-every", c.log_every,
                  "batches between step-log rows (default: about 50 rows an epoch)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--checkpoint-dir", c.checkpoint_dir,
                  "write a checkpoint after every epoch: a shard per rank and a manifest, "
                  "committed atomically (every mode)");
  sub->add_option("--checkpoint-every", c.checkpoint_every,
                  "also every N optimizer steps inside an epoch (resumed exactly)")
      ->check(CLI::NonNegativeNumber);
  sub->add_flag("--resume", c.resume,
                "continue from the checkpoint in --checkpoint-dir (a fresh start when it has "
                "none, so a restarted job can always pass it)");
  sub->add_option("--stop-after", c.stop_after, "run at most N epochs now (then --resume later)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--stop-after-steps", c.stop_after_steps,
                  "run at most N optimizer steps now (then --resume later)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--threads", o->threads, "intra-op threads (default: all cores)")
      ->check(CLI::NonNegativeNumber);
  add_output_flags(sub, o->output, "");
  sub->add_option("--trace", o->trace_path,
                  "write a Chrome trace (JSON; Perfetto, chrome://tracing) of every rank: "
                  "forward/backward, encode/decode, waits, all-reduces, optimizer steps "
                  "(--elastic: a file per process, PATH.replicaS-rankP-startN.json)");
  sub->add_flag("--no-progress", o->no_progress, "no progress line");
  sub->add_flag("--quiet", o->quiet, "no progress line and no table (results via --metrics)");
  auto& p = c.parallel.pipeline;
  add_typed_option(sub, "--parallel", c.parallel.mode, train::parse_parallel_mode,
                   "none, pipeline (one stage per rank, -n S), ddp (data parallel, -n N) or "
                   "diloco (-n R replicas training alone, averaged every --sync-every steps)");
  add_diloco_options(sub, c.parallel.diloco, o->compress_outer_auto);
  add_elastic_options(sub, c.parallel.elastic, o->elastic);
  auto& d = c.parallel.ddp;
  add_typed_option(sub, "--algo", d.algorithm, comm::parse_algorithm,
                   "ddp: all-reduce algorithm (" + comm::algorithm_names() + ")");
  sub->add_option("--bucket-mb", d.bucket_mb, "ddp: gradient bucket size in MiB (first bucket: 1)")
      ->capture_default_str();
  sub->add_flag("--sync-bn", d.sync_bn, "ddp: BatchNorm statistics over the global batch");
  sub->add_option("--grad-accum-steps", c.grad_accum_steps,
                  "batches per optimizer step (ddp: gradients cross the network on the last)")
      ->capture_default_str();
  add_typed_option(sub, "--placement", p.placement, parallel::pipeline::parse_placement,
                   "pipeline: linear (a chain) or ushape (rank 0 keeps the first and last blocks "
                   "and the loss)");
  sub->add_option("--client-blocks", o->client_blocks,
                  "ushape: F,L = blocks the client (rank 0) keeps at the start and the end")
      ->capture_default_str();
  sub->add_option("--balance", o->balance,
                  "pipeline: blocks per stage (ushape: per server), e.g. 3,5,4; 'auto' balances "
                  "measured forward+backward time; default balances parameter counts");
  add_typed_option(sub, "--schedule", p.schedule, parallel::pipeline::parse_schedule,
                   "pipeline schedule: " + parallel::pipeline::schedule_names(), p.schedule);
  sub->add_option("--chunks", p.chunks, "pipeline: micro-batches per mini-batch (1..1024)")
      ->capture_default_str();
  add_typed_option(
      sub, "--compress", p.activation_codec,
      [o](const std::string& text) {
        o->compress_auto = text == "auto";
        return o->compress_auto ? compress::CodecSpec{} : compress::parse_codec(text);
      },
      "pipeline: codec for activations on compressed edges (none, fp16, bf16, uniform:B, "
      "sortquant:B, sortquant:Q:S, kmeans:B, tile:B, rot[:T]:CODEC; dtrain codec --help), or "
      "auto: per link and epoch, the candidate "
      "with the least predicted step time");
  sub->add_option("--compress-candidates", o->compress_candidates,
                  "--compress auto: the codecs it chooses from")
      ->capture_default_str();
  sub->add_option("--compress-min-bits", o->compress_min_bits,
                  "--compress auto: never fewer bits per value than this (default 8; "
                  "--compress-outer auto: 2, as error feedback keeps 2-bit outer gradients "
                  "within 0.1 point of exact)")
      ->check(CLI::Range(1, 32));
  sub->add_option("--compress-runoff", o->compress_runoff,
                  "--compress auto and --compress-grad auto: a candidate predicted within this "
                  "fraction of the choice's step time is run off against it over the next "
                  "training steps (ABBA, 8 to 34 steps: about 1 s of them), and the faster as "
                  "measured is kept (0: trust the prediction)")
      ->check(CLI::Range(0.0, 100.0))
      ->capture_default_str();
  add_typed_option(
      sub, "--compress-grad", o->compress_grad,
      [o](const std::string& text) {
        o->compress_grad_auto = text == "auto";
        return o->compress_grad_auto ? compress::CodecSpec{} : compress::parse_codec(text);
      },
      "pipeline: codec for gradients (default: same as --compress); ddp: codec for the "
      "gradient all-reduce, with error feedback (default none), or auto: per epoch, the "
      "candidate with the least predicted step time",
      "");
  add_typed_option(
      sub, "--compress-edges", p.compress_all_edges,
      [](const std::string& text) { return kEdgeNames.parse(text); },
      "pipeline: client (only links touching rank 0) or all", kEdgeNames.to_string(false));
  sub->add_flag("--delta", p.delta,
                "pipeline: delta-code activations (AQ-SGD): each training sample's boundary "
                "activation goes as its change since the sample's last step, coded with "
                "--compress, against a cache both ends keep; micro-batches with a sample not "
                "seen yet (the first epoch) and evaluation go with --delta-warmup");
  add_typed_option(sub, "--delta-warmup", p.delta_warmup, compress::parse_codec,
                   "--delta: the codec of the warm-up (first epoch) and of evaluation",
                   to_string(p.delta_warmup));
  sub->add_option("--delta-cache-mb", p.delta_cache_mb,
                  "--delta: the most MiB of cache one rank may hold (checked before training)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30))
      ->capture_default_str();
  add_typed_option(
      sub, "--delta-cache-dtype", p.delta_cache_dtype,
      [](const std::string& text) { return kCacheDtypes.parse(text); },
      "--delta: the precision the caches keep: float32, bfloat16 or float16",
      kCacheDtypes.to_string(p.delta_cache_dtype));
  sub->add_flag("--measure-wire-check", p.measure_wire_check,
                "pipeline: training steps alternate the wire check off and on (off, on, on, off, "
                "...) and each epoch reports its cost in step time with a 95 % interval "
                "(wire_check_cost); evaluation keeps the job's setting (DTRAIN_WIRE_CHECK)");
  add_typed_option(sub, "--device", c.device, parse_device,
                   "cpu, cuda or cuda:N (cuda: GPU LOCAL_RANK); pipeline: the servers' device",
                   "cpu");
  add_typed_option(sub, "--memory-format", c.memory_format, models::parse_memory_format,
                   "layout of convolution weights and activations: channels-last (NHWC), "
                   "contiguous (NCHW) or auto (channels-last on the CPU for models with "
                   "convolutions, where it measured faster; contiguous on CUDA)");
  add_typed_option(sub, "--client-device", c.client_device, parse_device,
                   "pipeline: rank 0's device (default: --device), e.g. a CPU client with GPU "
                   "servers",
                   "");
  add_rank_flags(sub, o->ranks, false);
  sub->callback([o, &exit_code] {
    auto& pc = o->config.parallel.pipeline;
    if (o->balance == "auto") {
      pc.balance_auto = true;
    } else if (!o->balance.empty()) {
      for (int v : parse_int_list(o->balance, "--balance"))
        pc.balance.push_back(v);
    }
    const auto client = parse_int_list(o->client_blocks, "--client-blocks");
    if (client.size() != 2) throw std::invalid_argument("--client-blocks takes F,L");
    pc.client_first = client[0];
    pc.client_last = client[1];
    const auto worlds = world_sizes(o->ranks);
    const int n = worlds.empty() ? 1 : worlds.front();
    const bool pipelined = o->config.parallel.mode == train::ParallelMode::kPipeline;
    const bool data_parallel = o->config.parallel.mode == train::ParallelMode::kDdp;
    const bool diloco = o->config.parallel.mode == train::ParallelMode::kDiloco;
    if (n > 1 && !pipelined && !data_parallel && !diloco)
      throw std::invalid_argument("-n " + std::to_string(n) +
                                  " needs --parallel pipeline, ddp or diloco");
    if (diloco &&
        (pc.activation_codec != compress::CodecSpec{} || o->compress_grad || o->compress_auto))
      throw std::invalid_argument(
          "--parallel diloco exchanges pseudo-gradients: code them with --compress-outer");
    if (!diloco && diloco_flags_set(o->config.parallel.diloco))
      throw std::invalid_argument(
          "--sync-every, --outer-lr, --outer-momentum and --compress-outer are for --parallel "
          "diloco");
    if (data_parallel) {
      if (pc.activation_codec != compress::CodecSpec{})
        throw std::invalid_argument(
            "--compress is for pipeline activations; use --compress-grad "
            "for DDP gradients");
      o->config.parallel.ddp.gradient_codec = o->compress_grad.value_or(compress::CodecSpec{});
    } else {
      pc.gradient_codec = o->compress_grad;
    }
    if (pipelined && o->ranks.backend == comm::CollectiveBackend::kNccl)
      throw std::invalid_argument(
          "--backend nccl is for --parallel ddp: a pipeline's stages exchange tagged packets "
          "over Gloo, a CUDA stage's through host memory");
    if (data_parallel) decide_backend(o->ranks, o->config.device, n);  // errors before launch
    if (pc.measure_wire_check && !pipelined)
      throw std::invalid_argument(
          "--measure-wire-check is for --parallel pipeline (bench p2p: --wire-check both)");
    if (pc.delta) {
      if (!pipelined) throw std::invalid_argument("--delta is for --parallel pipeline");
      if (o->compress_auto)
        throw std::invalid_argument("--delta codes with a fixed --compress codec, not auto");
      if (pc.activation_codec == compress::CodecSpec{})
        throw std::invalid_argument("--delta needs a lossy --compress codec to code the changes");
    }
    if (o->compress_outer_auto) {
      if (!diloco) throw std::invalid_argument("--compress-outer auto is for --parallel diloco");
      o->config.parallel.diloco.auto_codec = auto_options(*o, kOuterMinBits);
    }
    if (o->compress_auto || o->compress_grad_auto) {
      const auto options = auto_options(*o, kMinBits);
      if (o->compress_auto) {
        if (!pipelined) throw std::invalid_argument("--compress auto is for --parallel pipeline");
        if (o->compress_grad)
          throw std::invalid_argument(
              "--compress auto chooses the gradients' codec too: drop --compress-grad");
        pc.auto_compress = options;
      } else {
        if (!data_parallel)
          throw std::invalid_argument(
              "--compress-grad auto is for --parallel ddp (pipelines: --compress auto)");
        o->config.parallel.ddp.auto_compress = options;
      }
    }
    if (o->config.data.name == "synthetic")
      o->config.data.input_shape = parse_shape(o->input_shape);
    o->config.progress = !o->no_progress && !o->quiet;
    o->config.command = command_line();
    check_elastic_flags(o->config.parallel.elastic);
    if (o->config.parallel.elastic.enabled) {
      o->elastic.trace_path = o->trace_path;
      exit_code = run_elastic(o->config, o->ranks, o->elastic, n);
      return;
    }
    if (const auto status = relaunch_if_requested(o->ranks, n)) {
      exit_code = *status;
      return;
    }
    if (o->threads < 0) throw std::invalid_argument("--threads must be positive");
    // OpenMP may default to 1 thread under a CPU quota; use every core this process may
    // run on unless told.
    at::set_num_threads(o->threads > 0 ? o->threads
                                       : static_cast<int>(comm::allowed_cores().size()));
    const auto format = o->output.format;
    std::unique_ptr<comm::Group> group;
    if (pipelined || data_parallel || diloco) {
      const int threads = at::get_num_threads();
      // Only DDP's collectives run on the model's device; a pipeline's wire and DiLoCo's
      // outer exchange (host copies) are Gloo's.
      group = join_world(o->ranks, o->threads,
                         data_parallel ? o->config.device : c10::Device(c10::kCPU));
      if (o->threads > 0) at::set_num_threads(threads);
    }
    TraceSession trace(o->trace_path, group.get());
    const auto history = train::train(o->config, group.get());
    trace.finish();
    exit_code = 0;
    if (history.empty() || (group && group->rank() != 0)) return;  // rank 0 reports
    std::vector<metrics::Row> rows;
    for (const auto& h : history)
      rows.push_back(h.to_row());
    stamp_command(rows);
    if (!o->output.report_path.empty())
      write_rows_report(o->output.report_path, run_report_rows(rows, history, trace.events()));
    if (o->quiet) return;
    metrics::write_rows(std::cout, format, train::epoch_columns(pipelined, rows.back()), rows);
    if (format != metrics::Format::kTable) return;
    namespace pp = parallel::pipeline;
    const metrics::Row last = history.back().to_row();
    if (pipelined) {
      std::cout << "\nlast epoch, per rank (time in training steps):\n";
      metrics::write_table(std::cout, pp::stage_columns(), pp::stage_rows(last));
      std::cout << "\nlast epoch, per link (seen by the receiver):\n";
      metrics::write_table(std::cout, pp::link_columns(), pp::link_rows(last));
    }
    if (last.contains(metrics::key::kAutoLinks)) {
      std::cout << "\nlast epoch, auto codec (chosen at its second step; DDP: the slowest link):\n";
      metrics::write_table(std::cout, pp::auto_columns(), pp::auto_rows(last));
    }
  });
}

}  // namespace dtrain::cli
