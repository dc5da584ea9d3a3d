// Diloco's --compress-outer auto (diloco.h, docs/diloco.md): the link probe beside the first
// inner steps, the vote on when every rank has its reading, the exchanges before the choice,
// the choice, and the choices again from the exchanges.
#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <tuple>

#include "dtrain/comm/group.h"
#include "dtrain/metrics/trace.h"
#include "dtrain/parallel/diloco.h"
#include "dtrain/parallel/diloco_auto.h"
#include "dtrain/parallel/readiness_vote.h"

namespace dtrain::parallel {

void Diloco::start_probe() {
  const auto t0 = metrics::Clock::now();
  link_reading_ = start_outer_probe(group_, outer_tag(2), outer_tag(3));
  stats_.sync_s += metrics::trace::span_since("communication", "outer link round trip", t0);
}

double Diloco::timed_step_s() const {
  if (!step_times_.empty()) return step_times_.median_s();
  return metrics::since(started_) / static_cast<double>(std::max<int64_t>(1, stats_.inner_steps));
}

void Diloco::decide_codec() {
  if (!link_reading_.valid()) start_probe();  // an exchange before any inner step
  const auto t0 = metrics::Clock::now();
  const auto post = [this] {
    vote_->post(link_reading_.wait_for(std::chrono::seconds(0)) == std::future_status::ready,
                timed_step_s());
    exchanges_since_vote_ = 0;
  };
  std::optional<ReadinessVote::Tally> tally;
  if (!vote_->out()) {  // the first: answered now
    post();
    tally = vote_->count();
  } else if (++exchanges_since_vote_ >= kVoteLag) {
    tally = vote_->count();
  }
  stats_.sync_s += metrics::trace::span_since("communication", "outer codec vote", t0);
  if (tally && tally->everywhere) {
    choose_codec(tally->slowest_step_s);
    return;
  }
  if (tally) post();
  if (provisional_) return;
  provisional_ = true;
  const compress::CodecSpec lossiest = lossiest_candidate();
  if (lossiest != compress::CodecSpec{}) codec_ = compress::make_codec(lossiest);
  log_choice("--compress-outer auto exchanges with " + compress::to_string(lossiest) +
             " until the link probe's reading is in on every replica");
}

void Diloco::switch_codec(const compress::CodecSpec& spec) {
  config_.codec = spec;
  codec_ = spec == compress::CodecSpec{} ? nullptr : compress::make_codec(spec);
  // Another codec carries the residuals on (a piece's length does not depend on it); the
  // exact exchange owes nothing, and its checkpoints hold none: they go, once the exchanges
  // in flight that use them have ended.
  if (codec_) return;
  settle_exchanges();
  for (auto& f : fragments_)
    f.feedback.reset(group_.size());
}

compress::CodecSpec Diloco::lossiest_candidate() const {
  return eligible_candidates(*config_.auto_codec).back();
}

void Diloco::choose_codec(double step_s) {
  const std::vector<compress::CodecSpec> candidates = eligible_candidates(*config_.auto_codec);
  OuterSetting setting;
  step_times_.clear();  // the second choice times the steps after this one
  std::tie(setting.rate_bytes_per_s, setting.latency_s) = link_reading_.get();  // in: no wait
  setting.step_s = step_s;
  // What this rank exchanges: fragment 0, or its block of it in a replica of several ranks.
  setting.values = fragments_.front().size / (replica_ != nullptr ? replica_->size() : 1);
  setting.replicas = group_.size();
  setting.sync_every = config_.sync_every;
  setting.fragments = config_.fragments;
  setting.sync_delay = config_.sync_delay;
  setting.epoch_steps = epoch_steps_;
  const OuterChoice choice = choose_outer_codec(candidates, setting);
  switch_codec(candidates[choice.chosen]);  // from the exchanges before it (provisional_)
  codec_pending_ = provisional_ = false;
  vote_.reset();
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
    switch_codec(candidates[choice.chosen]);
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

}  // namespace dtrain::parallel
