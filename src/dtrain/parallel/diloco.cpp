#include "dtrain/parallel/diloco.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <iostream>
#include <stdexcept>
#include <tuple>

#include "dtrain/comm/collectives.h"
#include "dtrain/comm/group.h"
#include "dtrain/comm/tags.h"
#include "dtrain/metrics/bandwidth.h"
#include "dtrain/metrics/timer.h"
#include "dtrain/metrics/trace.h"
#include "dtrain/parallel/coded_feedback.h"
#include "dtrain/parallel/diloco_auto.h"
#include "dtrain/parallel/exact_mean.h"

namespace dtrain::parallel {
namespace {

// Phases 0 and 1: the coded exchange's two; 2 and 3: auto's link probe.
int outer_tag(int phase) {
  static const comm::TagLayout layout(comm::TagSpace::kOuter, {{"phase", 2}});
  return layout.make({phase});
}

void check_config(const DilocoConfig& c, int64_t values) {
  if (c.sync_every < 1) throw std::invalid_argument("--sync-every must be at least 1");
  if (!(c.outer_lr > 0)) throw std::invalid_argument("--outer-lr must be positive");
  if (!(c.outer_momentum >= 0 && c.outer_momentum < 1))
    throw std::invalid_argument("--outer-momentum must be in [0, 1)");
  if (c.fragments < 1 || c.fragments > c.sync_every || c.fragments > values)
    throw std::invalid_argument(
        "--fragments must be between 1 and --sync-every (" + std::to_string(c.sync_every) +
        "), each fragment's offset a different step, and at most the model's " +
        std::to_string(values) + " parameters");
  const int64_t gap = c.sync_every / c.fragments;
  if (c.sync_delay < 0 || c.sync_delay > gap)
    throw std::invalid_argument("--sync-delay must be between 0 and --sync-every / --fragments (" +
                                std::to_string(gap) + "): one exchange in flight at a time");
  if (!(c.merge_alpha >= 0 && c.merge_alpha <= 1))
    throw std::invalid_argument("--merge-alpha must be in [0, 1]");
}

}  // namespace

Diloco::Diloco(comm::Group& group, std::vector<at::Tensor> parameters,
               std::vector<at::Tensor> buffers, DilocoConfig config, comm::Group* replica)
    : group_(group),
      replica_(replica != nullptr && replica->size() > 1 ? replica : nullptr),
      parameters_(std::move(parameters)),
      flat_(parameters_),
      config_(std::move(config)) {
  if (parameters_.empty()) throw std::invalid_argument("DiLoCo: the model has no parameters");
  int64_t values = 0;
  for (const auto& p : parameters_) {
    if (p.scalar_type() != at::kFloat)
      throw std::invalid_argument("DiLoCo: parameters must be float32");
    values += p.numel();
  }
  check_config(config_, values);
  if (replica_ != nullptr && values / config_.fragments < replica_->size())
    throw std::invalid_argument("DiLoCo: fragments smaller than a replica's ranks");
  for (auto& b : buffers)
    if (b.is_floating_point() && b.numel() > 0) buffers_.push_back(b);
  codec_pending_ = config_.auto_codec.has_value();
  if (!codec_pending_ && config_.codec != compress::CodecSpec{})
    codec_ = compress::make_codec(config_.codec);
  // Every replica starts where rank 0 does.
  const at::NoGradGuard no_grad;
  for (auto& t : parameters_) {
    at::Tensor host = t.detach().to(at::kCPU).contiguous();
    group_.native_broadcast(host, 0);
    t.detach().copy_(host);
  }
  for (auto& t : buffers_) {
    at::Tensor host = t.to(at::kCPU).contiguous();
    group_.native_broadcast(host, 0);
    t.copy_(host);
  }
  anchor_ = flat_.read_all();
  momentum_ = at::zeros_like(anchor_);
  const int64_t f_count = config_.fragments, h = config_.sync_every;
  for (int64_t f = 0; f < f_count; ++f) {
    Fragment fragment;
    const FragmentRange range = fragment_range(values, f_count, f);
    fragment.begin = range.begin;
    fragment.size = range.size;
    fragment.first_countdown = f == 0 ? h : h * f / f_count;
    // Under auto the probe runs beside the first H steps, as in blocking DiLoCo: the other
    // fragments' first exchanges, due before fragment 0's, wait a round (the first at H/F
    // steps left the probe exposed, 1 s of a 20 Mbit/s link's 8 s run).
    fragment.countdown = fragment.first_countdown + (codec_pending_ && f > 0 ? h : 0);
    fragment.feedback.reset(group_.size());
    fragments_.push_back(std::move(fragment));
  }
  if (config_.sync_delay > 0) worker_ = std::make_unique<BackgroundWorker>("diloco exchange");
  started_ = metrics::Clock::now();
}

void Diloco::start_probe() {
  link_reading_ = std::async(
      std::launch::async, [this] { return probe_outer_link(group_, outer_tag(2), outer_tag(3)); });
}

void Diloco::choose_codec() {
  const std::vector<compress::CodecSpec> candidates = eligible_candidates(*config_.auto_codec);
  OuterSetting setting;
  // The steps' own time (without the wait for the probe below); where none was timed (an
  // epoch of one step), the time since the start over the steps.
  at::Tensor step = at::tensor(
      {step_times_.empty() ? metrics::since(started_) /
                                 static_cast<double>(std::max<int64_t>(1, stats_.inner_steps))
                           : step_times_.median_s()},
      at::kDouble);
  step_times_.clear();                        // the second choice times the steps after this one
  if (!link_reading_.valid()) start_probe();  // an exchange before any inner step
  const auto t0 = metrics::Clock::now();
  std::tie(setting.rate_bytes_per_s, setting.latency_s) = link_reading_.get();
  // Training's wait for the probe's end is communication time, as an exchange's wait is.
  stats_.sync_s += metrics::trace::span_since("communication", "outer link probe wait", t0);
  group_.native_all_reduce(step, comm::ReduceOp::kMax);
  setting.step_s = step.item<double>();
  // What this rank exchanges: fragment 0, or its block of it in a replica of several ranks.
  setting.values = fragments_.front().size / (replica_ != nullptr ? replica_->size() : 1);
  setting.replicas = group_.size();
  setting.sync_every = config_.sync_every;
  setting.fragments = config_.fragments;
  setting.sync_delay = config_.sync_delay;
  setting.epoch_steps = epoch_steps_;
  const OuterChoice choice = choose_outer_codec(candidates, setting);
  config_.codec = candidates[choice.chosen];
  if (config_.codec != compress::CodecSpec{}) codec_ = compress::make_codec(config_.codec);
  codec_pending_ = false;
  measuring_ = setting;
  log_choice(describe(choice, candidates, setting));
}

// The probe's trains measure the link; the exchanges are what the training waits for. Between
// two idle inner windows TCP restarts from its initial window, and on a 100 ms link the
// exchanges took 2-3 times what the probe's rate predicted: a codec chosen to hide behind
// --sync-delay steps did not, and streaming lost to 2-bit blocking.
void Diloco::choose_codec_again() {
  OuterSetting setting = *measuring_;
  measuring_.reset();
  // The replica that reaches an exchange last waits least: its time is the link's, where the
  // others' include waiting for it (on a loaded loopback that wait alone made the exact
  // exchange look slow enough to code). The slowest replica's steps, as at the first choice
  // (negated, to go in the same minimum).
  at::Tensor measured =
      at::tensor({measured_s_ / static_cast<double>(measured_exchanges_),
                  -(step_times_.empty() ? setting.step_s : step_times_.median_s())},
                 at::kDouble);
  group_.native_all_reduce(measured, comm::ReduceOp::kMin);
  setting.step_s = -measured[1].item<double>();
  setting.rate_bytes_per_s =
      rate_from_exchanges(setting, measured[0].item<double>(),
                          measured_bytes_ / static_cast<double>(measured_exchanges_));
  // After a change, the new codec's own exchanges are measured in turn, and only it or a
  // lossier one may follow: an exchange's time is not linear in its bytes (on that link the
  // exact exchanges' rate made fp16's predicted 176 ms, and they took about 300), and
  // stepping one way only ends (at most once per candidate).
  const std::vector<compress::CodecSpec> candidates = eligible_candidates(*config_.auto_codec);
  const size_t floor = auto_floor_;
  const OuterChoice choice = choose_outer_codec(candidates, setting, floor);
  const std::string measured_with =
      !chosen_from_exchanges_ ? "its first " + std::to_string(measured_exchanges_) + " exchanges"
                              : std::to_string(measured_exchanges_) + " exchanges of " +
                                    compress::to_string(config_.codec);
  chosen_from_exchanges_ = true;
  const bool changed = candidates[choice.chosen] != config_.codec;
  if (changed) {
    config_.codec = candidates[choice.chosen];
    codec_ = config_.codec == compress::CodecSpec{} ? nullptr : compress::make_codec(config_.codec);
    // Another codec keeps the residuals (a piece's length does not depend on it); the exact
    // exchange owes nothing, and its checkpoints hold none.
    if (!codec_)
      for (auto& f : fragments_)
        f.feedback.reset(group_.size());
    auto_floor_ = choice.chosen;
    measuring_ = setting;
    step_times_.clear();
  }
  measured_exchanges_ = 0;
  measured_bytes_ = measured_s_ = 0;
  log_choice(describe(choice, candidates, setting, floor) + ", again from " + measured_with);
}

void Diloco::log_choice(const std::string& line) const {
  if (group_.rank() == 0 && (replica_ == nullptr || replica_->rank() == 0))
    std::cerr << "diloco: " << line << std::endl;
}

Diloco::~Diloco() = default;

at::Tensor Diloco::flat_buffers() const {
  return buffers_.empty() ? at::Tensor() : flatten_to_host(buffers_);
}

// May run on the worker: touches only the fragment's residuals, the codec and the group.
Diloco::Averaged Diloco::exchange(size_t fragment, const at::Tensor& pseudo_gradient,
                                  const at::Tensor& buffers) {
  const auto t0 = metrics::Clock::now();
  const at::NoGradGuard no_grad;
  Fragment& f = fragments_[fragment];
  Averaged out;
  // A replica of several ranks: this rank's block only, the others' from its replica after.
  at::Tensor piece = pseudo_gradient;
  if (replica_ != nullptr) {
    const int64_t n = pseudo_gradient.numel();
    const int parts = replica_->size(), me = replica_->rank();
    piece = pseudo_gradient.narrow(0, n * me / parts, comm::block_count(n, parts, me)).clone();
  }
  out.fp32_bytes = metrics::ring_allreduce_traffic(piece.numel() * 4, group_.size());
  out.buffers = buffers;
  if (!codec_) {
    exact_means(group_, {piece, out.buffers});  // one message
    out.wire_bytes = out.fp32_bytes;
  } else {
    out.wire_bytes =
        coded_mean_with_feedback(group_, piece, *codec_, f.feedback, outer_tag(0), outer_tag(1));
    if (out.buffers.defined()) exact_mean(group_, out.buffers);
  }
  out.pseudo_gradient = piece;  // whole once gathered (gather_blocks)
  out.seconds = metrics::trace::span_since("communication", "outer exchange", t0,
                                           static_cast<int64_t>(fragment), "fragment");
  return out;
}

// On the training thread: the replica's ranks are DDP's between inner steps, and its
// communication thread may use them during one.
void Diloco::gather_blocks(Averaged& averaged, int64_t size) {
  if (replica_ == nullptr) return;
  at::Tensor whole = at::empty({size}, averaged.pseudo_gradient.options());
  comm::all_gather(*replica_, averaged.pseudo_gradient, whole);
  averaged.pseudo_gradient = whole;
}

// The outer step (flat_parameters.h: Nesterov, as torch.optim.SGD) on the fragment's range.
void Diloco::apply(size_t fragment, const Averaged& averaged, double own_weight) {
  const Fragment& f = fragments_[fragment];
  const at::NoGradGuard no_grad;
  const at::Tensor g = averaged.pseudo_gradient.to(anchor_.device());
  at::Tensor anchor = anchor_.narrow(0, f.begin, f.size);
  nesterov_outer_step(anchor, momentum_.narrow(0, f.begin, f.size), g, config_.outer_lr,
                      config_.outer_momentum);
  flat_.write(f.begin, anchor, own_weight);
  if (averaged.buffers.defined()) copy_from_flat(averaged.buffers, buffers_);
  ++stats_.outer_steps;
  if (measuring_) {
    ++measured_exchanges_;
    measured_bytes_ += static_cast<double>(averaged.wire_bytes);
    measured_s_ += averaged.seconds;
  }
  stats_.exchange_s += averaged.seconds;
  stats_.wire_bytes += averaged.wire_bytes;
  stats_.fp32_bytes += averaged.fp32_bytes;
}

void Diloco::launch(size_t fragment, bool background) {
  // Nothing is in flight when an exchange starts: the group is free.
  if (codec_pending_) choose_codec();
  if (measuring_ && measured_exchanges_ >= kExchangesToMeasure) choose_codec_again();
  const auto t0 = metrics::Clock::now();
  Fragment& f = fragments_[fragment];
  at::Tensor g;
  {
    const at::NoGradGuard no_grad;
    g = (anchor_.narrow(0, f.begin, f.size) - flat_.read(f.begin, f.size))
            .to(at::kCPU)
            .contiguous();
  }
  if (!g.isfinite().all().item<bool>())
    throw std::runtime_error(group_.describe() +
                             ": DiLoCo's pseudo-gradient is not finite (training diverged? "
                             "lower --lr or --outer-lr)");
  const at::Tensor buffers = fragment == 0 ? flat_buffers() : at::Tensor();
  f.since = 0;
  f.countdown = config_.sync_every;
  if (!background) {
    Averaged averaged = exchange(fragment, g, buffers);
    gather_blocks(averaged, f.size);
    apply(fragment, averaged, 0);
  } else {
    if (in_flight_) throw std::logic_error("DiLoCo: two exchanges in flight");
    in_flight_.emplace();
    in_flight_->fragment = fragment;
    in_flight_->steps_left = config_.sync_delay;
    in_flight_->running =
        worker_->submit([this, fragment, g, buffers] { return exchange(fragment, g, buffers); });
  }
  stats_.sync_s += metrics::trace::span_since("communication", "outer step", t0);
}

void Diloco::settle() {
  if (link_reading_.valid()) link_reading_.wait();  // its reading stays for choose_codec
  if (!in_flight_ || in_flight_->settled) return;
  const auto t0 = metrics::Clock::now();
  in_flight_->settled = in_flight_->running.get();
  gather_blocks(*in_flight_->settled, fragments_[in_flight_->fragment].size);
  const double waited = metrics::trace::span_since("communication", "outer wait", t0);
  in_flight_->waited_s += waited;
  stats_.sync_s += waited;
}

void Diloco::land(double own_weight) {
  settle();
  const auto t0 = metrics::Clock::now();
  const Averaged& averaged = *in_flight_->settled;
  apply(in_flight_->fragment, averaged, own_weight);
  stats_.hidden_s += std::max(0.0, averaged.seconds - in_flight_->waited_s);
  in_flight_.reset();
  stats_.sync_s += metrics::trace::span_since("communication", "outer step", t0);
}

bool Diloco::after_inner_step() {
  const bool timing = codec_pending_ || measuring_;
  if (timing) step_times_.step_ended();
  if (codec_pending_ && !link_reading_.valid()) start_probe();
  ++stats_.inner_steps;
  for (auto& f : fragments_) {
    ++f.since;
    --f.countdown;
  }
  if (in_flight_ && --in_flight_->steps_left == 0) land(config_.merge_alpha);
  // The epoch's last steps: a round due now would leave fewer than H/2 steps for the next.
  // Its last step leaves every fragment to sync(), blocking, as the evaluation needs them.
  const int64_t left = epoch_steps_ - epoch_step_ - 1;
  const bool joins_the_last = epoch_step_ >= 0 && 2 * left < config_.sync_every;
  bool started = false;
  for (size_t i = 0; i < fragments_.size(); ++i) {
    if (fragments_[i].countdown > 0 || joins_the_last) continue;
    launch(i, /*background=*/worker_ != nullptr);
    started = true;
  }
  if (timing) step_times_.step_started();
  return started;
}

bool Diloco::sync() {
  step_times_.pause();  // the next step comes after an evaluation
  bool did = false;
  // Applied early, and whole: every replica must end on the shared parameters.
  if (in_flight_) {
    land(0);
    did = true;
  }
  for (size_t i = 0; i < fragments_.size(); ++i) {
    if (fragments_[i].since == 0) continue;
    launch(i, /*background=*/false);
    did = true;
  }
  // The schedule starts over, staggered as at the start.
  for (auto& f : fragments_)
    f.countdown = f.first_countdown;
  return did;
}

DilocoStats Diloco::take_stats() {
  stats_.codec = codec_pending_ ? "auto" : compress::to_string(config_.codec);
  const DilocoStats out = stats_;
  stats_ = DilocoStats{};
  return out;
}

}  // namespace dtrain::parallel
