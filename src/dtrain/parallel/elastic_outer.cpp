#include "dtrain/parallel/elastic_outer.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <stdexcept>
#include <tuple>

#include "dtrain/base/crc32c.h"
#include "dtrain/comm/group.h"
#include "dtrain/comm/tags.h"
#include "dtrain/metrics/bandwidth.h"
#include "dtrain/metrics/timer.h"
#include "dtrain/metrics/trace.h"
#include "dtrain/parallel/auto_codec.h"
#include "dtrain/parallel/diloco_auto.h"
#include "dtrain/parallel/exact_mean.h"

namespace dtrain::parallel {

// Phases 0 and 1: the coded exchange's; 2 and 3: auto's probe (elastic_sync.h takes uses 1-4).
int elastic_outer_tag(int phase) {
  static const comm::TagLayout layout(comm::TagSpace::kElastic, {{"use", 4}, {"phase", 4}});
  return layout.make({0, phase});
}

namespace {

// The residuals of error feedback, copied: restored when an exchange fails.
struct ResidualsSnapshot {
  std::vector<at::Tensor> scatter;
  at::Tensor gather;
};

ResidualsSnapshot snapshot(const FeedbackResiduals& r) {
  ResidualsSnapshot s;
  for (const auto& e : r.scatter)
    s.scatter.push_back(e.residual().defined() ? e.residual().clone() : at::Tensor());
  s.gather = r.gather.residual().defined() ? r.gather.residual().clone() : at::Tensor();
  return s;
}

void restore(FeedbackResiduals& r, ResidualsSnapshot s) {
  r.scatter.assign(s.scatter.size(), compress::ErrorFeedback{});
  for (size_t i = 0; i < r.scatter.size(); ++i)
    r.scatter[i].restore(std::move(s.scatter[i]));
  r.gather.restore(std::move(s.gather));
}

}  // namespace

void check_elastic_config(const DilocoConfig& c) {
  if (c.sync_every < 1) throw std::invalid_argument("--sync-every must be at least 1");
  if (c.fragments < 1 || c.sync_every % c.fragments != 0)
    throw std::invalid_argument(
        "--elastic with --fragments F needs --sync-every a multiple of F (a round is H / F "
        "steps and exchanges one fragment); got --sync-every " +
        std::to_string(c.sync_every) + " and --fragments " + std::to_string(c.fragments));
  const int64_t round = c.sync_every / c.fragments;
  if (c.sync_delay < 0 || c.sync_delay >= round)
    throw std::invalid_argument(
        "--elastic runs an exchange beside the last --sync-delay steps of its own round: at "
        "most --sync-every / --fragments - 1 (" +
        std::to_string(round - 1) + ")");
  if (!(c.merge_alpha >= 0 && c.merge_alpha <= 1))
    throw std::invalid_argument("--merge-alpha must be in [0, 1]");
  if (c.ranks_per_replica < 1)
    throw std::invalid_argument("--ranks-per-replica must be at least 1");
}

ElasticOuter::ElasticOuter(std::vector<at::Tensor> parameters, std::vector<at::Tensor> buffers,
                           const DilocoConfig& config)
    : flat_(std::move(parameters)), config_(config) {
  check_elastic_config(config_);
  if (flat_.size() == 0) throw std::invalid_argument("DiLoCo: the model has no parameters");
  for (const auto& p : flat_.tensors())
    if (p.scalar_type() != at::kFloat)
      throw std::invalid_argument("DiLoCo: parameters must be float32");
  for (auto& b : buffers)
    if (b.is_floating_point() && b.numel() > 0) buffers_.push_back(b);
  if (config_.auto_codec)
    candidates_ = eligible_candidates(*config_.auto_codec);
  else if (config_.codec != compress::CodecSpec{})
    codec_ = compress::make_codec(config_.codec);
  const int64_t values = flat_.size(), count = config_.fragments;
  if (count > values)
    throw std::invalid_argument("--fragments " + std::to_string(count) + " exceeds the model's " +
                                std::to_string(values) + " parameters");
  for (int64_t f = 0; f < count; ++f) {
    const FragmentRange range = fragment_range(values, count, f);
    Fragment fragment;
    fragment.begin = range.begin;
    fragment.size = range.size;
    fragments_.push_back(std::move(fragment));
  }
  const at::NoGradGuard no_grad;
  anchor_ = flat_.read_all().to(at::kCPU).contiguous();
  momentum_ = at::zeros_like(anchor_);
  shared_buffers_ = flat_buffers();
}

std::vector<size_t> ElasticOuter::due(int64_t since_whole, bool whole) const {
  const auto count = static_cast<int64_t>(fragments_.size());
  if (whole || count == 1) {
    std::vector<size_t> all(fragments_.size());
    for (size_t f = 0; f < all.size(); ++f)
      all[f] = f;
    return all;
  }
  return {static_cast<size_t>((since_whole + 1) % count)};
}

ElasticOuter::~ElasticOuter() {
  settle_probe();
}

std::string ElasticOuter::codec_name() const {
  return !candidates_.empty() && choice_ < 0 ? "auto" : compress::to_string(config_.codec);
}

at::Tensor ElasticOuter::flat_buffers() const {
  return buffers_.empty() ? at::Tensor() : flatten_to_host(buffers_);
}

at::Tensor ElasticOuter::pseudo_gradient() const {
  const at::NoGradGuard no_grad;
  at::Tensor g = (anchor_ - flat_.read_all().to(at::kCPU)).contiguous();
  if (!g.isfinite().all().item<bool>())
    throw std::runtime_error(
        "DiLoCo's pseudo-gradient is not finite (training diverged? lower --lr or --outer-lr)");
  return g;
}

ElasticOuter::Averaged ElasticOuter::exchange(comm::Group& group,
                                              const at::Tensor& pseudo_gradient) {
  return exchange(group, pseudo_gradient, due(0, true), buffers_now());
}

ElasticOuter::Averaged ElasticOuter::exchange(comm::Group& group, const at::Tensor& pseudo_gradient,
                                              const std::vector<size_t>& fragments,
                                              const at::Tensor& buffers) {
  const auto t0 = metrics::Clock::now();
  const at::NoGradGuard no_grad;
  Averaged out;
  out.fragments = fragments;
  out.mean = pseudo_gradient.clone();
  // A failure leaves auto's choice as it was too: the members that finished the probe and
  // those that did not then choose again alike, among the survivors.
  const int64_t choice_before = choice_;
  auto chosen = t0;
  // Every due fragment's residuals as they were: a failure in any of the exchanges restores
  // them all (the redo runs them again from here).
  std::vector<std::pair<ResidualsSnapshot, int>> before;
  try {
    if (!candidates_.empty() && choice_ < 0) {
      choose_codec(group);
      chosen = metrics::Clock::now();
    }
    for (const size_t f : fragments) {
      if (codec_) before.emplace_back(snapshot(fragments_[f].feedback), fragments_[f].rank);
      exchange_fragment(group, f, f == 0 && buffers.defined() ? buffers.clone() : at::Tensor(),
                        out);
    }
  } catch (...) {
    for (size_t i = 0; i < before.size(); ++i) {
      restore(fragments_[fragments[i]].feedback, std::move(before[i].first));
      fragments_[fragments[i]].rank = before[i].second;
    }
    set_choice(choice_before);
    throw;
  }
  out.seconds = metrics::trace::span_since("communication", "outer exchange", t0);
  out.measured_s = metrics::since(chosen);
  out.codec = codec_name();
  return out;
}

// As Diloco's exchange: the floating-point buffers travel with fragment 0, exact.
void ElasticOuter::exchange_fragment(comm::Group& group, size_t index, at::Tensor buffers,
                                     Averaged& out) {
  Fragment& f = fragments_[index];
  at::Tensor mean = out.mean.narrow(0, f.begin, f.size);
  const int64_t fp32 = metrics::ring_allreduce_traffic(f.size * 4, group.size());
  out.fp32_bytes += fp32;
  if (!codec_) {
    exact_means(group, {mean, buffers});  // one message
    out.wire_bytes += fp32;
  } else {
    const auto world_before = static_cast<int>(f.feedback.scatter.size());
    if (world_before != group.size() || f.rank != group.rank()) {
      carry_residuals(f.feedback, f.size, world_before, f.rank, group.size(), group.rank());
      f.rank = group.rank();
    }
    at::Tensor piece = mean.clone();
    out.wire_bytes += coded_mean_with_feedback(group, piece, *codec_, f.feedback,
                                               elastic_outer_tag(0), elastic_outer_tag(1));
    mean.copy_(piece);
    if (buffers.defined()) exact_mean(group, buffers);
  }
  if (buffers.defined()) out.buffers = buffers;
}

void ElasticOuter::apply(const Averaged& averaged, double own_weight) {
  ++writes_;
  const at::NoGradGuard no_grad;
  for (const size_t index : averaged.fragments) {
    const Fragment& f = fragments_.at(index);
    at::Tensor anchor = anchor_.narrow(0, f.begin, f.size);
    nesterov_outer_step(anchor, momentum_.narrow(0, f.begin, f.size),
                        averaged.mean.narrow(0, f.begin, f.size), config_.outer_lr,
                        config_.outer_momentum);
    flat_.write(f.begin, anchor, own_weight);
  }
  if (averaged.buffers.defined()) {
    copy_from_flat(averaged.buffers, buffers_);
    shared_buffers_ = averaged.buffers.clone();
  }
}

uint64_t ElasticOuter::digest() const {
  const auto crc = [](const at::Tensor& t, uint32_t seed) {
    return t.defined() ? crc32c(t.data_ptr(), static_cast<size_t>(t.nbytes()), seed) : seed;
  };
  const uint32_t a = crc(shared_buffers_, crc(anchor_, 0));
  const uint32_t c = crc32c(&choice_, sizeof choice_, crc(momentum_, 0x9e3779b9u));
  return (static_cast<uint64_t>(a) << 32) | c;
}

int64_t ElasticOuter::packed_values() const {
  int64_t n = 2 * anchor_.numel() + 1;
  for (const auto& b : buffers_)
    n += b.numel();
  return n;
}

at::Tensor ElasticOuter::pack() const {
  std::vector<at::Tensor> parts{anchor_, momentum_};
  if (shared_buffers_.defined()) parts.push_back(shared_buffers_);
  parts.push_back(at::full({1}, static_cast<float>(choice_), at::kFloat));
  return at::cat(parts);
}

void ElasticOuter::unpack(const at::Tensor& state) {
  ++writes_;
  if (state.numel() != packed_values() || state.scalar_type() != at::kFloat)
    throw std::invalid_argument(
        "DiLoCo state of " + std::to_string(state.numel()) + " values where this model's holds " +
        std::to_string(packed_values()) + " (a replica of another model or run?)");
  const float choice = state[state.numel() - 1].item<float>();
  const auto candidates = static_cast<float>(candidates_.size());
  if (choice != std::floor(choice) || choice < -1 || choice >= std::max(0.0f, candidates))
    throw std::invalid_argument("DiLoCo state with outer codec choice " + std::to_string(choice) +
                                " where this replica has " + std::to_string(candidates_.size()) +
                                " auto candidates (a replica of another configuration?)");
  const at::NoGradGuard no_grad;
  const int64_t n = anchor_.numel();
  anchor_.copy_(state.narrow(0, 0, n));
  momentum_.copy_(state.narrow(0, n, n));
  if (!buffers_.empty()) {
    shared_buffers_ = state.narrow(0, 2 * n, state.numel() - 2 * n - 1).clone();
    copy_from_flat(shared_buffers_, buffers_);
  }
  flat_.write(0, anchor_);
  set_choice(static_cast<int64_t>(choice));
  reset_residuals(static_cast<int>(fragments_.front().feedback.scatter.size()));
}

void ElasticOuter::unpack_momentum(const at::Tensor& momentum) {
  if (momentum.numel() != momentum_.numel() || momentum.scalar_type() != at::kFloat)
    throw std::invalid_argument("DiLoCo outer momentum of " + std::to_string(momentum.numel()) +
                                " values where this model's holds " +
                                std::to_string(momentum_.numel()));
  momentum_.copy_(momentum.reshape({-1}));
}

void ElasticOuter::refine(const at::Tensor& first) {
  ++writes_;
  const int64_t n = anchor_.numel();
  if (first.numel() != packed_values() - n || first.scalar_type() != at::kFloat)
    throw std::invalid_argument("DiLoCo state of " + std::to_string(first.numel()) +
                                " values to refine where this model's holds " +
                                std::to_string(packed_values() - n));
  if (first[first.numel() - 1].item<float>() != static_cast<float>(choice_))
    throw std::invalid_argument("the exact DiLoCo state names another outer codec choice");
  const at::NoGradGuard no_grad;
  const at::Tensor exact = first.narrow(0, 0, n);
  // What the inner steps moved stays: the parameters shift by what θ shifts.
  flat_.write(0, flat_.read_all().to(at::kCPU) + (exact - anchor_));
  anchor_.copy_(exact);
  if (!buffers_.empty()) {
    const at::Tensor shared = first.narrow(0, n, first.numel() - n - 1);
    copy_from_flat(flat_buffers() + (shared - shared_buffers_), buffers_);
    shared_buffers_ = shared.clone();
  }
}

void ElasticOuter::perturb(double delta) {
  ++writes_;
  anchor_.add_(delta);
}

void ElasticOuter::reset_residuals(int group_size) {
  for (auto& f : fragments_) {
    f.feedback.reset(group_size);
    f.rank = -1;
  }
}

}  // namespace dtrain::parallel
