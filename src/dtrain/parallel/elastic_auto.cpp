// Elastic DiLoCo's `--compress-outer auto` (elastic_outer.h): the first choice from the
// founders' probed link, and the choices again from the exchanges, made alike by every member
// from the round's records.
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>
#include <tuple>

#include "dtrain/comm/group.h"
#include "dtrain/parallel/diloco_auto.h"
#include "dtrain/parallel/elastic_outer.h"

namespace dtrain::parallel {

// As DiLoCo's first choice (diloco.cpp), over the group of the first exchange: the founders'
// link and steps (a joiner's link is not probed: it takes the choice with the state, and its
// exchanges then count in choose_again).
void ElasticOuter::start_probe(comm::Group& group) {
  if (candidates_.empty() || choice_ >= 0 || probe_.valid()) return;
  probe_ = start_outer_probe(group, elastic_outer_tag(2), elastic_outer_tag(3));
}

void ElasticOuter::settle_probe() {
  if (!probe_.valid()) return;
  try {
    probe_.get();
  } catch (const std::exception&) {  // its group failed: the exchange that fails says so
  }
}

void ElasticOuter::choose_codec(comm::Group& group) {
  OuterSetting setting;
  // The probe started beside the inner steps, over this group (a recovery settles it before
  // its group goes), or one now.
  if (!probe_.valid())
    probe_ = start_outer_probe(group, elastic_outer_tag(2), elastic_outer_tag(3));
  std::tie(setting.rate_bytes_per_s, setting.latency_s) = probe_.get();
  at::Tensor step = at::tensor({step_s_}, at::kDouble);
  group.native_all_reduce(step, comm::ReduceOp::kMax);
  setting.step_s = step.item<double>();
  setting.values = fragments_.front().size;  // the largest: they differ by one at most
  setting.replicas = group.size();
  setting.sync_every = config_.sync_every;
  setting.fragments = config_.fragments;
  const OuterChoice choice = choose_outer_codec(candidates_, setting);
  set_choice(static_cast<int64_t>(choice.chosen));
  // The probe's reading bounds the rates the exchanges show later, as in Diloco (a rate from
  // them is never above it), and gives their latency.
  measured_.rate_bytes_per_s = setting.rate_bytes_per_s;
  measured_.latency_s = setting.latency_s;
  if (group.rank() == 0)
    std::cerr << "elastic: " << describe(choice, candidates_, setting) << std::endl;
}

void ElasticOuter::set_choice(int64_t choice) {
  if (choice == choice_) return;
  choice_ = choice;
  config_.codec = choice < 0 ? compress::CodecSpec{} : candidates_[static_cast<size_t>(choice)];
  codec_ = config_.codec == compress::CodecSpec{} ? nullptr : compress::make_codec(config_.codec);
  reset_residuals(static_cast<int>(fragments_.front().feedback.scatter.size()));
  count_afresh();  // exchanges of another codec say nothing of this one's
}

void ElasticOuter::count_afresh() {
  measured_.exchanges = 0;
  measured_.exchange_s = measured_.bytes = 0;
}

void ElasticOuter::count_exchange(const std::string& group, const Averaged& averaged) {
  if (candidates_.empty() || choice_ < 0) return;
  // An epoch's last round exchanges every fragment: not the exchange the choice is about.
  if (averaged.fragments.size() > 1) return;
  if (group != measured_group_) {
    measured_group_ = group;
    measuring_ = true;
    measured_.floor = 0;
    count_afresh();
  }
  if (!measuring_) return;
  ++measured_.exchanges;
  measured_.exchange_s += averaged.measured_s;
  measured_.bytes += static_cast<double>(averaged.wire_bytes);
}

ExchangeMeasure ElasticOuter::measured() const {
  ExchangeMeasure m = measured_;
  m.step_s = step_s_;
  if (!measuring_) m.exchanges = 0;
  return m;
}

std::string ElasticOuter::choose_again(const std::vector<ExchangeMeasure>& members) {
  if (candidates_.empty() || choice_ < 0 || members.size() < 2) return {};
  double exchange_s = std::numeric_limits<double>::infinity(), bytes = 0;
  OuterSetting s;
  size_t floor = 0;
  for (const ExchangeMeasure& m : members) {
    if (m.exchanges < kExchangesToMeasure) return {};
    exchange_s = std::min(exchange_s, m.exchange_s / static_cast<double>(m.exchanges));
    bytes = std::max(bytes, m.bytes / static_cast<double>(m.exchanges));
    s.step_s = std::max(s.step_s, m.step_s);
    s.rate_bytes_per_s = std::max(s.rate_bytes_per_s, m.rate_bytes_per_s);
    s.latency_s = std::max(s.latency_s, m.latency_s);
    floor = std::max(floor, static_cast<size_t>(std::clamp<int64_t>(
                                m.floor, 0, static_cast<int64_t>(candidates_.size()) - 1)));
  }
  s.values = fragments_.front().size;
  s.replicas = static_cast<int>(members.size());
  s.sync_every = config_.sync_every;
  s.fragments = config_.fragments;
  const int64_t counted = members.front().exchanges;
  const std::string measured_with = std::to_string(counted) + " exchanges of " + codec_name();
  count_afresh();
  // What any member knew of the link (the founders' probe) every member knows from now on, so
  // a group of joiners only, once the founders are gone, still has it (alike everywhere: every
  // member chooses from the same records).
  measured_.rate_bytes_per_s = s.rate_bytes_per_s;
  measured_.latency_s = s.latency_s;
  // No member knows the link's rate (the founders are gone): the exchanges alone tell it.
  if (!(s.rate_bytes_per_s > 0)) s.rate_bytes_per_s = std::numeric_limits<double>::infinity();
  s.rate_bytes_per_s = rate_from_exchanges(s, exchange_s, bytes);
  if (!std::isfinite(s.rate_bytes_per_s)) return {};  // nothing seen on the wire: count afresh
  const OuterChoice choice = choose_outer_codec(candidates_, s, floor);
  const bool changed = static_cast<int64_t>(choice.chosen) != choice_;
  measured_.floor = static_cast<int64_t>(choice.chosen);
  measuring_ = changed;
  if (changed) set_choice(static_cast<int64_t>(choice.chosen));
  return describe(choice, candidates_, s, floor) + ", again from " + measured_with;
}

}  // namespace dtrain::parallel
