#include "dtrain/parallel/diloco.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <stdexcept>

#include "dtrain/comm/collectives.h"
#include "dtrain/comm/group.h"
#include "dtrain/comm/tags.h"
#include "dtrain/metrics/bandwidth.h"
#include "dtrain/metrics/timer.h"
#include "dtrain/metrics/trace.h"
#include "dtrain/parallel/coded_feedback.h"
#include "dtrain/parallel/diloco_auto.h"
#include "dtrain/parallel/exact_mean.h"
#include "dtrain/parallel/readiness_vote.h"

namespace dtrain::parallel {
namespace {

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
  if (c.sync_delay < 0 || c.sync_delay > c.sync_every)
    throw std::invalid_argument("--sync-delay must be between 0 and --sync-every (" +
                                std::to_string(c.sync_every) +
                                "): a fragment's exchange lands before its next starts");
  if (Diloco::exchanges_in_flight(c) > Diloco::kMostInFlight)
    throw std::invalid_argument("--sync-delay " + std::to_string(c.sync_delay) + " keeps " +
                                std::to_string(Diloco::exchanges_in_flight(c)) +
                                " exchanges in flight at once, more than " +
                                std::to_string(Diloco::kMostInFlight));
  if (!(c.merge_alpha >= 0 && c.merge_alpha <= 1))
    throw std::invalid_argument("--merge-alpha must be in [0, 1]");
}

}  // namespace

int Diloco::outer_tag(int phase, int64_t slot) {
  static const comm::TagLayout layout(comm::TagSpace::kOuter, {{"slot", 8}, {"phase", 3}});
  return layout.make({slot, phase});
}

int64_t Diloco::exchanges_in_flight(const DilocoConfig& c) {
  if (c.sync_delay == 0) return 0;
  // Consecutive fragments' offsets f H / F lie at least floor(H / F) steps apart.
  const int64_t gap = std::max<int64_t>(1, c.sync_every / c.fragments);
  return (c.sync_delay + gap - 1) / gap;
}

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
  if (codec_pending_) vote_ = std::make_unique<ReadinessVote>(group_, outer_tag(4));
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
    fragment.countdown = fragment.first_countdown;
    fragment.feedback.reset(group_.size());
    fragments_.push_back(std::move(fragment));
  }
  // One thread a slot: exchanges in flight at once run side by side, each on its own tags.
  for (int64_t slot = 0; slot < exchanges_in_flight(config_); ++slot)
    workers_.push_back(
        std::make_unique<BackgroundWorker>("diloco exchange " + std::to_string(slot)));
  started_ = metrics::Clock::now();
}

Diloco::~Diloco() = default;

at::Tensor Diloco::flat_buffers() const {
  return buffers_.empty() ? at::Tensor() : flatten_to_host(buffers_);
}

// May run on a worker: touches only the fragment's residuals, `codec` and the group (on the
// slot's tags).
Diloco::Averaged Diloco::exchange(size_t fragment, const at::Tensor& pseudo_gradient,
                                  const at::Tensor& buffers,
                                  const std::shared_ptr<const compress::Codec>& codec,
                                  int64_t slot) {
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
  const int exact_tag = outer_tag(5, slot);  // and phase 6: all_reduce's exchange takes two
  if (!codec) {
    exact_means(group_, {piece, out.buffers}, exact_tag);  // one message
    out.wire_bytes = out.fp32_bytes;
  } else {
    out.wire_bytes = coded_mean_with_feedback(group_, piece, *codec, f.feedback, outer_tag(0, slot),
                                              outer_tag(1, slot));
    if (out.buffers.defined()) exact_mean(group_, out.buffers, exact_tag);
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
  // Other fragments' exchanges may be in flight, each on its slot's tags (auto settles them
  // before a choice that touches their residuals).
  if (codec_pending_) decide_codec();
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
    if (!in_flight_.empty())
      throw std::logic_error("DiLoCo: an exchange in flight at a blocking one");
    Averaged averaged = exchange(fragment, g, buffers, codec_, 0);
    gather_blocks(averaged, f.size);
    apply(fragment, averaged, 0);
  } else {
    const bool busy = std::any_of(in_flight_.begin(), in_flight_.end(),
                                  [&](const InFlight& e) { return e.fragment == fragment; });
    if (busy || in_flight_.size() >= workers_.size())
      throw std::logic_error("DiLoCo: more exchanges in flight than --sync-delay allows");
    // The slot whose exchange landed longest ago: slots exchanges back, at least
    // slots * floor(H / F) >= tau steps (exchanges_in_flight).
    const int64_t slot = next_slot_;
    next_slot_ = (next_slot_ + 1) % static_cast<int64_t>(workers_.size());
    InFlight& e = in_flight_.emplace_back();
    e.fragment = fragment;
    e.steps_left = config_.sync_delay;
    e.running = workers_[static_cast<size_t>(slot)]->submit(
        [this, fragment, g, buffers, codec = codec_, slot] {
          return exchange(fragment, g, buffers, codec, slot);
        });
  }
  stats_.sync_s += metrics::trace::span_since("communication", "outer step", t0);
}

void Diloco::settle() {
  if (link_reading_.valid()) link_reading_.wait();  // its reading stays for choose_codec
  settle_exchanges();
}

void Diloco::settle_exchanges() {
  for (auto& e : in_flight_)
    settle_exchange(e);
}

// Not the probe: before auto's choice exchanges land beside it.
void Diloco::settle_exchange(InFlight& e) {
  if (e.settled) return;
  const auto t0 = metrics::Clock::now();
  e.settled = e.running.get();
  gather_blocks(*e.settled, fragments_[e.fragment].size);
  const double waited = metrics::trace::span_since("communication", "outer wait", t0);
  e.waited_s += waited;
  stats_.sync_s += waited;
}

void Diloco::land(double own_weight) {
  InFlight& e = in_flight_.front();
  settle_exchange(e);
  const auto t0 = metrics::Clock::now();
  const Averaged& averaged = *e.settled;
  apply(e.fragment, averaged, own_weight);
  stats_.hidden_s += std::max(0.0, averaged.seconds - e.waited_s);
  in_flight_.pop_front();
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
  // Every exchange in flight has the same delay: they land in the order they started.
  for (auto& e : in_flight_)
    --e.steps_left;
  while (!in_flight_.empty() && in_flight_.front().steps_left == 0)
    land(config_.merge_alpha);
  // The epoch's last steps: a round due now would leave fewer than H/2 steps for the next.
  // Its last step leaves every fragment to sync(), blocking, as the evaluation needs them.
  const int64_t left = epoch_steps_ - epoch_step_ - 1;
  const bool joins_the_last = epoch_step_ >= 0 && 2 * left < config_.sync_every;
  bool started = false;
  for (size_t i = 0; i < fragments_.size(); ++i) {
    if (fragments_[i].countdown > 0 || joins_the_last) continue;
    launch(i, /*background=*/!workers_.empty());
    started = true;
  }
  if (timing) step_times_.step_started();
  return started;
}

bool Diloco::sync() {
  step_times_.pause();  // the next step comes after an evaluation
  bool did = false;
  // Applied early, and whole: every replica must end on the shared parameters.
  while (!in_flight_.empty()) {
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
  // Auto's probe may outlast exchanges: the group is free again only once it has ended.
  if (link_reading_.valid()) link_reading_.wait();
  return did;
}

DilocoStats Diloco::take_stats() {
  // The codec in force at the epoch's end: before auto's choice, what its exchanges went with.
  if (!codec_pending_)
    stats_.codec = compress::to_string(config_.codec);
  else
    stats_.codec = provisional_ ? compress::to_string(lossiest_candidate()) : "auto";
  const DilocoStats out = stats_;
  stats_ = DilocoStats{};
  return out;
}

}  // namespace dtrain::parallel
