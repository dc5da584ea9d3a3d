#include "dtrain/parallel/ddp_codec_tuner.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <iostream>

#include "dtrain/comm/group.h"
#include "dtrain/comm/link_probe.h"
#include "dtrain/comm/tags.h"
#include "dtrain/metrics/keys.h"
#include "dtrain/parallel/codec_timing.h"

namespace dtrain::parallel {
namespace {

const comm::TagLayout kTuningTags(comm::TagSpace::kTuning, {{"purpose", 4}});
const int kPingTag = kTuningTags.make({0});
const int kDataTag = kTuningTags.make({1});

// The slowest directed link between rank 0 and the others, as a probe saw it.
struct Slowest {
  int src = 0, dst = 0;
  double rate = 1e30, latency = 0;
};

Slowest probe_from_rank0(comm::Group& g) {
  Slowest s;
  for (int r = 1; r < g.size(); ++r) {
    if (g.rank() != 0 && g.rank() != r) continue;
    const comm::LinkProbe p =
        comm::probe_link(g, g.rank() == 0 ? r : 0, g.rank() == 0, kPingTag, kDataTag);
    if (g.rank() != 0) continue;
    if (p.out_bytes_per_s < s.rate) s = {0, r, p.out_bytes_per_s, p.latency_s};
    if (p.in_bytes_per_s < s.rate) s = {r, 0, p.in_bytes_per_s, p.latency_s};
  }
  return s;
}

// One step's cost of exchanging `gradients` under `spec` (see the header for the traffic).
CandidateCost cost_of(const compress::CodecSpec& spec, const at::Tensor& gradients, int world) {
  const double share = 2.0 * (world - 1) / world;
  if (spec == compress::CodecSpec{})
    return {spec, share * 4.0 * static_cast<double>(gradients.numel()), 0, 0};
  CandidateCost c = time_codec(spec, gradients);
  c.bytes *= share;
  c.decode_s *= share;
  return c;
}

}  // namespace

DdpCodecTuner::DdpCodecTuner(comm::Group& group, const AutoCompress& options)
    : group_(group),
      candidates_(eligible_candidates(options)),
      runoff_window_(options.runoff_window),
      chosen_(candidates_.size() - 1) {}

void DdpCodecTuner::calibrate(const at::Tensor& gradients, double compute_s, double messages) {
  const Slowest slowest = probe_from_rank0(group_);
  // The choice, the runoff's other side (-1: none) and its pairs.
  auto decision = at::full({3}, -1, at::kLong);
  if (group_.rank() == 0 && group_.size() > 1) {
    LinkMeasurement link;
    link.src = link.dst = 0;  // coding runs on every rank alike: charge it to one
    link.rate_bytes_per_s = slowest.rate;
    link.latency_s = slowest.latency;
    link.messages = messages;
    for (const auto& spec : candidates_)
      link.costs.push_back(cost_of(spec, gradients, group_.size()));
    AutoInput input;
    input.compute_s = {compute_s};
    input.micro_batches = 1;
    input.links = {link};
    choice_ = choose_codecs(input);
    choice_[0].src = slowest.src;
    choice_[0].dst = slowest.dst;
    decision[0] = static_cast<int64_t>(choice_[0].chosen);
    if (const auto plan = plan_runoff(input, choice_, runoff_window_)) {
      decision[1] = static_cast<int64_t>(plan->b[0]);
      decision[2] = runoff_pairs_for(choice_[0].predicted_step_s.at(choice_[0].chosen));
    }
    std::cerr << "auto (DDP gradients, slowest link): " << describe(choice_[0], link.costs)
              << std::endl;
  }
  group_.native_broadcast(decision, 0);
  const auto count = static_cast<int64_t>(candidates_.size());
  const int64_t chosen = decision[0].item<int64_t>(), other = decision[1].item<int64_t>(),
                pairs = decision[2].item<int64_t>();
  if (group_.size() == 1) {  // nothing crosses a wire
    chosen_ = 0;
    return;
  }
  if (chosen < 0 || chosen >= count || other < -1 || other >= count ||
      (other >= 0 && (pairs < kRunoffMinPairs || pairs > kRunoffMaxPairs)))
    throw std::runtime_error(group_.describe() + ": rank 0 chose an unknown codec");
  chosen_ = static_cast<size_t>(chosen);
  runoff_.reset();
  if (other >= 0) runoff_.emplace(RunoffPlan{{chosen_}, {static_cast<size_t>(other)}}, pairs);
}

const compress::CodecSpec& DdpCodecTuner::codec_for_next_step() const {
  return candidates_[runoff_ ? runoff_->next()[0] : chosen_];
}

void DdpCodecTuner::record_step(double seconds, int64_t samples) {
  if (!runoff_) return;
  runoff_->record(seconds, samples);
  if (!runoff_->decided()) return;
  const RunoffPlan plan = runoff_->plan();
  auto b_wins = at::zeros({1}, at::kLong);
  if (group_.rank() == 0) {
    const auto measured = runoff_->summary();
    b_wins[0] = runoff_prefers_b(plan, measured) ? 1 : 0;
    std::cerr << "auto (DDP gradients): "
              << settle_runoff(plan, measured, b_wins[0].item<int64_t>() == 1, candidates_, choice_)
              << std::endl;
  }
  group_.native_broadcast(b_wins, 0);
  chosen_ = b_wins[0].item<int64_t>() == 1 ? plan.b[0] : plan.a[0];
  runoff_.reset();
}

void DdpCodecTuner::end_epoch() {
  if (runoff_ && group_.rank() == 0) {
    std::cerr << "auto (DDP gradients): the epoch ended before the runoff ("
              << runoff_->summary().pairs << " of " << runoff_->pairs()
              << " pairs): the prediction's choice stays" << std::endl;
  }
  runoff_.reset();
}

std::vector<metrics::Row> DdpCodecTuner::rows() const {
  std::vector<metrics::Row> out;
  for (const auto& c : choice_)
    out.push_back(to_row(c, candidates_));
  return out;
}

}  // namespace dtrain::parallel
