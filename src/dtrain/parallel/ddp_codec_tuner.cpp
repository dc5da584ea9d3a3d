#include "dtrain/parallel/ddp_codec_tuner.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <iostream>

#include "dtrain/comm/group.h"
#include "dtrain/comm/link_probe.h"
#include "dtrain/comm/tags.h"
#include "dtrain/metrics/keys.h"
#include "dtrain/parallel/codec_timing.h"
#include "dtrain/parallel/ddp_tuner_messages.h"

namespace dtrain::parallel {
namespace {

const comm::TagLayout kTuningTags(comm::TagSpace::kTuning, {{"purpose", 4}});
const int kPingTag = kTuningTags.make({0});
const int kDataTag = kTuningTags.make({1});

// The slowest directed link between rank 0 and the others, as a probe (or the last step's
// exchange) saw it.
struct Slowest {
  int src = 0, dst = 0;
  double rate = 1e30, latency = 0;
  bool from_step = false;
};

// An exchange that kept a direction busy this long measures its rate well enough: the
// ranks' skew (the ends of their backward passes, milliseconds apart here) is a few percent
// of it. Shorter (fast links, small models), the probe measures instead.
constexpr double kStepMeasuresFromS = 0.1;

// What the last synchronized step's exchange moved on every link of rank 0, both ways
// (ddp_tuner_messages.h), the same on every rank.
StepTraffic step_traffic(comm::Group& g, const std::vector<comm::LinkCounters>& last_step) {
  StepTraffic mine;
  mine.links.resize(static_cast<size_t>(g.size()));
  for (int r = 1; r < g.size(); ++r) {
    auto& link = mine.links[static_cast<size_t>(r)];
    if (g.rank() == r)
      link.from_rank0 = {static_cast<double>(last_step[0].bytes), last_step[0].active_s};
    if (g.rank() == 0) {
      const auto& in = last_step[static_cast<size_t>(r)];
      link.to_rank0 = {static_cast<double>(in.bytes), in.active_s};
    }
  }
  at::Tensor summed = mine.to_message();
  g.native_all_reduce(summed, comm::ReduceOp::kSum);
  return StepTraffic::from_message(summed, g.size(), "the ranks' sum");
}

// The slowest link from the step's traffic, when every direction was busy long enough
// (every rank reaches the same answer from the same numbers); the latency comes from pings.
std::optional<Slowest> slowest_from_step(comm::Group& g, const StepTraffic& traffic) {
  Slowest s;
  for (int r = 1; r < g.size(); ++r) {
    const auto& link = traffic.links[static_cast<size_t>(r)];
    for (const int way : {0, 1}) {
      const StepTraffic::Way& w = way == 0 ? link.from_rank0 : link.to_rank0;
      if (w.bytes <= 0 || w.busy_s < kStepMeasuresFromS) return std::nullopt;
      if (w.bytes / w.busy_s < s.rate)
        s = {way == 0 ? 0 : r, way == 0 ? r : 0, w.bytes / w.busy_s, 0, true};
    }
  }
  for (int r = 1; r < g.size(); ++r) {
    if (g.rank() != 0 && g.rank() != r) continue;
    const double latency = comm::probe_latency(g, g.rank() == 0 ? r : 0, g.rank() == 0, kPingTag);
    s.latency = std::max(s.latency, latency);
  }
  return s;
}

Slowest probe_from_rank0(comm::Group& g) {
  const comm::SlowestLink l = comm::probe_slowest_from_rank0(g, kPingTag, kDataTag);
  return {l.src, l.dst, l.rate_bytes_per_s, l.latency_s};
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
      chosen_(candidates_.size() - 1),
      counted_(static_cast<size_t>(group.size())),
      last_step_(static_cast<size_t>(group.size())) {}

void DdpCodecTuner::calibrate(const at::Tensor& gradients, double compute_s, double messages) {
  const std::optional<Slowest> measured =
      slowest_from_step(group_, step_traffic(group_, last_step_));
  const Slowest slowest = measured ? *measured : probe_from_rank0(group_);
  TunerDecision decision;  // rank 0's
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
    choice_[0].rate_from = slowest.from_step ? "step" : "probe";
    decision.chosen = static_cast<int64_t>(choice_[0].chosen);
    if (const auto plan = plan_runoff(input, choice_, runoff_window_)) {
      decision.runoff_other = static_cast<int64_t>(plan->b[0]);
      decision.runoff_pairs = runoff_pairs_for(choice_[0].predicted_step_s.at(choice_[0].chosen));
    }
    std::cerr << "auto (DDP gradients, slowest link"
              << (slowest.from_step ? ", rate from the last step's exchange" : "")
              << "): " << describe(choice_[0], link.costs) << std::endl;
  }
  if (group_.size() == 1) {  // nothing crosses a wire
    chosen_ = 0;
    return;
  }
  at::Tensor message = decision.to_message();
  group_.native_broadcast(message, 0);
  const TunerDecision d =
      TunerDecision::from_message(message, static_cast<int64_t>(candidates_.size()),
                                  kRunoffMinPairs, kRunoffMaxPairs, "rank 0");
  chosen_ = static_cast<size_t>(d.chosen);
  runoff_.reset();
  if (d.runoff_other >= 0)
    runoff_.emplace(RunoffPlan{{chosen_}, {static_cast<size_t>(d.runoff_other)}}, d.runoff_pairs);
}

const compress::CodecSpec& DdpCodecTuner::codec_for_next_step() const {
  return candidates_[runoff_ ? runoff_->next()[0] : chosen_];
}

void DdpCodecTuner::record_step(double seconds, int64_t samples) {
  for (int peer = 0; peer < group_.size(); ++peer) {
    if (peer == group_.rank()) continue;
    const comm::LinkCounters now = group_.link_stats(peer).recv;
    comm::LinkCounters& before = counted_[static_cast<size_t>(peer)];
    if (now.bytes < before.bytes) before = {};  // the counters were reset
    last_step_[static_cast<size_t>(peer)] = {
        now.bytes - before.bytes, now.messages - before.messages, now.active_s - before.active_s,
        now.wait_s - before.wait_s};
    before = now;
  }
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
