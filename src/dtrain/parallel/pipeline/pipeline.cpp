#include "dtrain/parallel/pipeline/pipeline.h"

#include <torch/torch.h>

#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>

#include "dtrain/comm/group.h"
#include "dtrain/comm/tags.h"
#include "dtrain/compress/codec.h"
#include "dtrain/metrics/memory.h"
#include "dtrain/metrics/timer.h"

namespace dtrain::parallel::pipeline {
namespace {

using metrics::Clock;
using metrics::since;

// The pipeline's tag space (comm/tags.h): kind, destination stage, micro-batch.
enum TagKind {
  kActivationTag = 1,
  kGradientTag = 2,
  kLabelTag = 3,
  kResultTag = 4,
  kCommandTag = 5
};
const comm::TagLayout& tag_layout() {
  static const comm::TagLayout layout(comm::TagSpace::kPipeline,
                                      {{"kind", 3}, {"stage", 10}, {"micro-batch", 11}});
  return layout;
}
int tag(TagKind kind, int stage = 0, int micro_batch = 0) {
  return tag_layout().make({kind, stage, micro_batch});
}
constexpr int kMaxMicroBatches = 1024;  // <= tag_layout().limit(2)

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

int64_t fingerprint(const PipelineConfig& c, int64_t blocks, int64_t parameters) {
  std::string text = std::to_string(blocks) + "/" + std::to_string(parameters) + "/" +
                     schedule_name(c.schedule) + "/" + std::to_string(c.micro_batches) + "/" +
                     c.activation_codec + "/" + c.gradient_codec + "/" +
                     std::to_string(c.compress_all_edges);
  for (const auto& s : c.partition.stages)
    text +=
        "/" + std::to_string(s.rank) + ":" + std::to_string(s.begin) + "-" + std::to_string(s.end);
  return static_cast<int64_t>(std::hash<std::string>{}(text) & ((uint64_t{1} << 62) - 1));
}

}  // namespace

struct Pipeline::Pending {
  std::vector<uint8_t> bytes;
  at::Tensor tensor;
  comm::Request request;
};

Pipeline::Pipeline(comm::Group& group, torch::nn::Sequential model, PipelineConfig config)
    : group_(group), config_(std::move(config)) {
  stage_rank_ = config_.partition.stage_ranks();
  const int64_t blocks = static_cast<int64_t>(model->size());
  if (config_.micro_batches < 1 || config_.micro_batches > kMaxMicroBatches)
    throw std::invalid_argument("--chunks must be 1.." + std::to_string(kMaxMicroBatches));
  const int64_t stage_limit = tag_layout().limit(1);
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

  activation_codec_ = compress::make_codec(config_.activation_codec);
  gradient_codec_ = compress::make_codec(config_.gradient_codec);
  plain_codec_ = compress::make_codec("none");

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
    my_stages_.push_back(static_cast<int>(v));
    modules_.push_back(part);
  }

  // Every rank must agree: compare min and max of a configuration fingerprint.
  const int64_t mine = fingerprint(config_, blocks, [&] {
    int64_t n = 0;
    for (const auto& p : model->parameters())
      n += p.numel();
    return n;
  }());
  auto lo = at::full({1}, mine, at::kLong);
  auto hi = lo.clone();
  group_.native_all_reduce(lo, comm::ReduceOp::kMin);
  group_.native_all_reduce(hi, comm::ReduceOp::kMax);
  if (lo.item<int64_t>() != hi.item<int64_t>()) {
    throw std::invalid_argument(group_.describe() +
                                ": the ranks disagree on the pipeline (model, partition, "
                                "schedule, chunks or codecs differ between ranks)");
  }
}

Pipeline::~Pipeline() {
  // Sends still in flight reference our buffers: let them finish (or fail) first.
  for (auto& p : pending_) {
    try {
      p->request.wait();
    } catch (...) {
    }
  }
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

bool Pipeline::compressed_edge(int rank_a, int rank_b) const {
  return config_.compress_all_edges || rank_a == 0 || rank_b == 0;
}

void Pipeline::send_tensor(const at::Tensor& t, int from_stage, int to_stage, int micro_batch,
                           bool gradient) {
  const int to_rank = stage_rank_[static_cast<size_t>(to_stage)];
  if (to_rank == group_.rank()) {
    local_handoff_[{gradient, to_stage, micro_batch}] = t.detach();
    return;
  }
  const compress::Codec& codec = !compressed_edge(group_.rank(), to_rank) ? *plain_codec_
                                 : gradient                               ? *gradient_codec_
                                                                          : *activation_codec_;
  auto pending = std::make_unique<Pending>();
  const auto t0 = Clock::now();
  try {
    pending->bytes = compress::encode(codec, t.detach());
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(std::string(gradient ? "gradients" : "activations") + " of stage " +
                             std::to_string(from_stage) + ", micro-batch " +
                             std::to_string(micro_batch) + " cannot be sent: " + e.what() +
                             " (training diverged? lower --lr)");
  }
  if (counting_) times_.encode_s += since(t0);
  pending->request =
      group_.isend_bytes(pending->bytes, to_rank,
                         tag(gradient ? kGradientTag : kActivationTag, to_stage, micro_batch));
  pending_.push_back(std::move(pending));
}

at::Tensor Pipeline::receive_tensor(int from_stage, int to_stage, int micro_batch, bool gradient) {
  const int from_rank = stage_rank_[static_cast<size_t>(from_stage)];
  if (from_rank == group_.rank()) {
    auto it = local_handoff_.find({gradient, to_stage, micro_batch});
    at::Tensor t = it->second;
    local_handoff_.erase(it);
    return t;
  }
  auto t0 = Clock::now();
  const auto packet = group_.recv_bytes(
      from_rank, tag(gradient ? kGradientTag : kActivationTag, to_stage, micro_batch));
  const double waited = since(t0);
  t0 = Clock::now();
  at::Tensor t = compress::decode(packet);
  if (counting_) {
    times_.recv_wait_s += waited;
    times_.decode_s += since(t0);
    auto& link = links_[{from_rank, gradient}];
    link.src = from_rank;
    link.dst = group_.rank();
    link.direction = gradient ? "backward" : "forward";
    link.bytes += static_cast<int64_t>(packet.size());
    link.fp32_bytes += 4 * t.numel();
    link.messages += 1;
    link.recv_time_s += waited;
  }
  return t;
}

void Pipeline::wait_sends() {
  const auto t0 = Clock::now();
  for (auto& p : pending_)
    p->request.wait();
  pending_.clear();
  if (counting_) times_.send_wait_s += since(t0);
}

void Pipeline::send_command(const Command& c) {
  auto pending = std::make_unique<Pending>();
  pending->tensor =
      at::tensor({static_cast<double>(c.kind), static_cast<double>(c.batch), c.lr}, at::kDouble);
  for (int r = 1; r < group_.size(); ++r) {
    auto p = std::make_unique<Pending>();
    p->tensor = pending->tensor;
    p->request = group_.isend(p->tensor, r, tag(kCommandTag));
    pending_.push_back(std::move(p));
  }
}

Command Pipeline::next_command() {
  auto t = at::empty({3}, at::kDouble);
  group_.recv(t, 0, tag(kCommandTag));
  const auto* v = t.data_ptr<double>();
  Command c;
  const int kind = static_cast<int>(v[0]);
  if (kind < 1 || kind > 4 || v[1] < 0)
    throw std::runtime_error(group_.describe() + ": corrupt pipeline command from rank 0");
  c.kind = static_cast<CommandKind>(kind);
  c.batch = static_cast<int64_t>(v[1]);
  c.lr = v[2];
  return c;
}

void Pipeline::execute(const Command& c) {
  switch (c.kind) {
    case CommandKind::kTrain:
    case CommandKind::kEval:
      run(c.kind == CommandKind::kTrain, c.batch, {}, {});
      break;
    case CommandKind::kReport: {
      const std::string text = nlohmann::json(local_report()).dump();
      const std::vector<uint8_t> bytes(text.begin(), text.end());
      group_.isend_bytes(bytes, 0, comm::report_tag()).wait();
      reset_counters();
      break;
    }
    case CommandKind::kStop:
      break;
  }
}

StepResult Pipeline::train_batch(const at::Tensor& inputs, const at::Tensor& labels, double lr) {
  send_command({CommandKind::kTrain, inputs.size(0), lr});
  return run(true, inputs.size(0), inputs, labels);
}

StepResult Pipeline::eval_batch(const at::Tensor& inputs, const at::Tensor& labels) {
  send_command({CommandKind::kEval, inputs.size(0), 0});
  return run(false, inputs.size(0), inputs, labels);
}

void Pipeline::stop() {
  send_command({CommandKind::kStop, 0, 0});
  wait_sends();
}

StepResult Pipeline::run(bool training, int64_t batch, const at::Tensor& inputs,
                         const at::Tensor& labels) {
  const auto step_start = Clock::now();
  counting_ = training;
  const int m = micro_batches_for(batch);
  const auto sizes = split_sizes(batch, m);
  const Schedule& schedule = schedule_for(training, m);
  const int last = schedule.stages() - 1;
  const int loss_rank = stage_rank_[static_cast<size_t>(last)];
  const int me = group_.rank();
  std::vector<at::Tensor> input_chunks, label_chunks;
  if (me == 0) {
    input_chunks = split_rows(inputs, sizes);
    label_chunks = split_rows(labels.contiguous(), sizes);
    if (loss_rank != 0) {  // the linear chain: labels go to the last stage
      for (int mb = 0; mb < m; ++mb) {
        auto p = std::make_unique<Pending>();
        p->tensor = label_chunks[static_cast<size_t>(mb)].contiguous();
        p->request = group_.isend(p->tensor, loss_rank, tag(kLabelTag, 0, mb));
        pending_.push_back(std::move(p));
      }
    }
  }
  for (auto& module : modules_)
    module->train(training);
  torch::AutoGradMode grad_mode(training);

  struct Live {
    at::Tensor input, output, loss;
  };
  std::map<std::pair<int, int>, Live> live;
  StepResult result;
  for (const Op& op : schedule.by_rank[static_cast<size_t>(me)]) {
    const size_t local = static_cast<size_t>(
        std::find(my_stages_.begin(), my_stages_.end(), op.stage) - my_stages_.begin());
    if (op.kind == OpKind::kForward) {
      Live l;
      l.input = op.stage == 0 ? input_chunks[static_cast<size_t>(op.micro_batch)]
                              : receive_tensor(op.stage - 1, op.stage, op.micro_batch, false);
      if (training && op.stage > 0) l.input.requires_grad_(true);
      at::Tensor y;
      if (op.stage == last) {
        if (me == 0) {
          y = label_chunks[static_cast<size_t>(op.micro_batch)];
        } else {  // the linear chain's last stage: labels from the driver
          const auto t_wait = Clock::now();
          y = at::empty({sizes[static_cast<size_t>(op.micro_batch)]}, at::kLong);
          group_.recv(y, 0, tag(kLabelTag, 0, op.micro_batch));
          if (counting_) times_.recv_wait_s += since(t_wait);
        }
      }
      const auto t0 = Clock::now();
      l.output = modules_[local]->forward(l.input);
      if (op.stage == last) {
        l.loss = torch::nn::functional::cross_entropy(
                     l.output, y,
                     torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum)) /
                 static_cast<double>(batch);
        result.loss_sum += l.loss.item<double>() * static_cast<double>(batch);
        result.correct += l.output.argmax(1).eq(y).sum().item<int64_t>();
        result.samples += y.size(0);
      }
      if (counting_) times_.forward_s += since(t0);
      if (op.stage != last) send_tensor(l.output, op.stage, op.stage + 1, op.micro_batch, false);
      if (training) {
        live[{op.stage, op.micro_batch}] = std::move(l);
      }
    } else {
      auto it = live.find({op.stage, op.micro_batch});
      Live& l = it->second;
      at::Tensor grad;
      if (op.stage != last) grad = receive_tensor(op.stage + 1, op.stage, op.micro_batch, true);
      const auto t0 = Clock::now();
      // A parameter-free first stage (a flatten) has nothing to differentiate.
      if (op.stage == last && l.loss.requires_grad())
        l.loss.backward();
      else if (op.stage != last && l.output.requires_grad())
        l.output.backward(grad);
      if (counting_) times_.backward_s += since(t0);
      if (op.stage > 0) send_tensor(l.input.grad(), op.stage, op.stage - 1, op.micro_batch, true);
      live.erase(it);
    }
  }
  if (loss_rank != 0) {  // the last stage reports loss and accuracy to the driver
    auto summary = at::empty({3}, at::kDouble);
    if (me == loss_rank) {
      summary[0] = result.loss_sum;
      summary[1] = static_cast<double>(result.correct);
      summary[2] = static_cast<double>(result.samples);
      group_.send(summary, 0, tag(kResultTag));
    } else if (me == 0) {
      group_.recv(summary, loss_rank, tag(kResultTag));
      result.loss_sum = summary[0].item<double>();
      result.correct = static_cast<int64_t>(summary[1].item<double>());
      result.samples = static_cast<int64_t>(summary[2].item<double>());
    }
  }
  wait_sends();
  if (counting_) {
    times_.step_s += since(step_start);
    times_.steps += 1;
  }
  counting_ = false;
  return result;
}

RankReport Pipeline::local_report() const {
  RankReport r;
  r.rank = group_.rank();
  r.blocks = block_names_;
  r.times = times_;
  for (const auto& [key, link] : links_)
    r.links.push_back(link);
  r.peak_rss_bytes = metrics::peak_rss_bytes();
  return r;
}

void Pipeline::reset_counters() {
  times_ = StageTimes{};
  links_.clear();
}

std::vector<RankReport> Pipeline::collect_reports() {
  send_command({CommandKind::kReport, 0, 0});
  wait_sends();
  std::vector<RankReport> out{local_report()};
  reset_counters();
  for (int r = 1; r < group_.size(); ++r) {
    const auto bytes = group_.recv_bytes(r, comm::report_tag(), int64_t{1} << 24);
    RankReport rep;
    try {
      nlohmann::json::parse(bytes.begin(), bytes.end()).get_to(rep);
    } catch (const nlohmann::json::exception& e) {
      throw std::runtime_error("corrupt pipeline report from rank " + std::to_string(r) + ": " +
                               e.what());
    }
    if (rep.rank != r) {
      throw std::runtime_error("pipeline report from rank " + std::to_string(r) +
                               " says it is from rank " + std::to_string(rep.rank));
    }
    out.push_back(std::move(rep));
  }
  return out;
}

std::vector<double> measure_block_times(torch::nn::Sequential& model, const at::Tensor& input,
                                        int repeats) {
  const size_t n = model->size();
  std::vector<double> total(n, 0.0);
  for (int rep = 0; rep <= repeats; ++rep) {  // pass 0 warms up
    at::Tensor x = input;
    for (size_t b = 0; b < n; ++b) {
      const at::Tensor in = x.detach().requires_grad_(b > 0);
      const auto t0 = Clock::now();
      const at::Tensor out = model->begin()[static_cast<std::ptrdiff_t>(b)].forward(in);
      out.backward(at::ones_like(out));
      if (rep > 0) total[b] += since(t0);
      x = out;
    }
  }
  for (auto& t : total)
    t /= std::max(1, repeats);
  return total;
}

}  // namespace dtrain::parallel::pipeline
