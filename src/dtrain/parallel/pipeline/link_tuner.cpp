#include "dtrain/parallel/pipeline/link_tuner.h"

#include <ATen/ATen.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <iostream>
#include <map>
#include <set>

#include "dtrain/comm/group.h"
#include "dtrain/comm/link_probe.h"
#include "dtrain/parallel/codec_timing.h"
#include "dtrain/parallel/pipeline/command.h"
#include "dtrain/parallel/pipeline/transport.h"

namespace dtrain::parallel::pipeline {

namespace {
enum Purpose { kPing = 0, kData = 1, kMeasurements = 2, kCodecs = 3 };
}  // namespace

// Named, not anonymous: LinkTuner::Measurement holds them (a member of a type with linkage
// must have linkage too, which GCC checks when the file is part of a unity batch).
namespace calibration {

// A rank's calibration message to the driver, and the one definition of its JSON (by key:
// a missing key is an error naming it).
struct ProbedLink {
  int src = 0, dst = 0;
  double rate = 0, latency = 0;  // bytes/s on the wire, one-way seconds
};
struct SentCost {  // one candidate on one outgoing link, per step
  double bytes = 0, encode_s = 0, decode_s = 0;
};
struct SentLink {
  int dst = 0;
  double messages = 0;          // per step
  std::vector<SentCost> costs;  // one per candidate, in candidate order
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(ProbedLink, src, dst, rate, latency)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(SentCost, bytes, encode_s, decode_s)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(SentLink, dst, messages, costs)

}  // namespace calibration

struct LinkTuner::Measurement {
  int rank = 0;
  double compute_s = 0;
  std::vector<calibration::ProbedLink> probes;  // both directions of each link this rank initiated
  std::vector<calibration::SentLink> links;     // this rank's outgoing compressed links
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(LinkTuner::Measurement, rank, compute_s, probes, links)

LinkTuner::LinkTuner(StageTransport& wire, const std::vector<int>& stage_rank,
                     const AutoCompress& options)
    : wire_(wire),
      candidates_(eligible_candidates(options)),
      runoff_window_(options.runoff_window) {
  const int me = wire_.group().rank();
  std::set<std::pair<int, int>> pairs;  // sorted: one global order of probes
  for (size_t s = 0; s + 1 < stage_rank.size(); ++s) {
    const int a = std::min(stage_rank[s], stage_rank[s + 1]);
    const int b = std::max(stage_rank[s], stage_rank[s + 1]);
    if (a != b && (a == me || b == me) && wire_.compresses(a == me ? b : a)) pairs.insert({a, b});
  }
  pairs_.assign(pairs.begin(), pairs.end());
  // Until the first decision every tuned link carries the most compressive candidate.
  for (const auto& [a, b] : pairs_) {
    wire_.set_link_codec(a, b, candidates_.back());
    wire_.set_link_codec(b, a, candidates_.back());
  }
  wire_.keep_samples(true);
}

LinkTuner::~LinkTuner() = default;

void LinkTuner::probe_pairs(Measurement& m) {
  comm::Group& g = wire_.group();
  for (const auto& [a, b] : pairs_) {  // the same order on both ends: no one waits in a cycle
    const bool initiator = a == g.rank();
    const comm::LinkProbe p =
        comm::probe_link(g, initiator ? b : a, initiator, StageTransport::tuning_tag(kPing),
                         StageTransport::tuning_tag(kData));
    if (!initiator) continue;
    m.probes.push_back({a, b, p.out_bytes_per_s, p.latency_s});
    m.probes.push_back({b, a, p.in_bytes_per_s, p.latency_s});
  }
}

LinkTuner::Measurement LinkTuner::measure(double compute_s) {
  Measurement m{wire_.group().rank(), compute_s, {}, {}};
  probe_pairs(m);
  const double steps = static_cast<double>(std::max<int64_t>(1, wire_.times().steps));
  std::map<int, calibration::SentLink> links;
  for (const auto& [to, sent] : wire_.sent()) {
    const int dst = to.first;
    if (!wire_.compresses(dst)) continue;
    calibration::SentLink& link = links[dst];
    link.dst = dst;
    link.costs.resize(candidates_.size());
    const double per_step = static_cast<double>(sent.messages) / steps;
    link.messages += per_step;
    for (size_t i = 0; i < candidates_.size(); ++i) {
      const CandidateCost one = time_codec(candidates_[i], sent.sample);
      link.costs[i].bytes += one.bytes * per_step;
      link.costs[i].encode_s += one.encode_s * per_step;
      link.costs[i].decode_s += one.decode_s * per_step;
    }
  }
  for (auto& [dst, link] : links)
    m.links.push_back(std::move(link));
  return m;
}

// `codecs`: [[src, dst, codec name], ...], every link this rank sends or receives on.
void LinkTuner::apply(const nlohmann::json& codecs) {
  for (const auto& link : codecs)
    wire_.set_link_codec(link.at(0).get<int>(), link.at(1).get<int>(),
                         compress::parse_codec(link.at(2).get<std::string>()));
}

void LinkTuner::calibrate_as_follower(double compute_s) {
  comm::Group& g = wire_.group();
  const std::string text = nlohmann::json(measure(compute_s)).dump();
  g.isend_bytes(std::vector<uint8_t>(text.begin(), text.end()), 0,
                StageTransport::tuning_tag(kMeasurements))
      .wait();
  receive_codecs();
}

void LinkTuner::receive_codecs() {
  const auto reply = wire_.group().recv_bytes(0, StageTransport::tuning_tag(kCodecs), 1 << 20);
  apply(nlohmann::json::parse(reply.begin(), reply.end()));
}

AutoInput LinkTuner::to_input(const std::vector<Measurement>& all, int micro_batches) const {
  AutoInput input;
  input.micro_batches = micro_batches;
  std::map<std::pair<int, int>, calibration::ProbedLink> probes;
  for (const auto& m : all) {
    input.compute_s.push_back(m.compute_s);
    for (const auto& p : m.probes)
      probes[{p.src, p.dst}] = p;
  }
  for (const auto& m : all) {
    for (const auto& l : m.links) {
      const calibration::ProbedLink& probe = probes.at({m.rank, l.dst});
      LinkMeasurement lm{m.rank, l.dst, probe.rate, probe.latency, l.messages, {}};
      for (size_t i = 0; i < candidates_.size(); ++i) {
        const calibration::SentCost& c = l.costs.at(i);
        lm.costs.push_back({candidates_[i], c.bytes, c.encode_s, c.decode_s});
      }
      input.links.push_back(std::move(lm));
    }
  }
  return input;
}

void LinkTuner::calibrate_as_driver(double compute_s, int micro_batches) {
  comm::Group& g = wire_.group();
  std::vector<Measurement> all{measure(compute_s)};
  for (int r = 1; r < g.size(); ++r) {
    const auto bytes = g.recv_bytes(r, StageTransport::tuning_tag(kMeasurements), 1 << 24);
    all.push_back(nlohmann::json::parse(bytes.begin(), bytes.end()).get<Measurement>());
  }
  const AutoInput input = to_input(all, micro_batches);
  choices_ = choose_codecs(input);
  for (size_t i = 0; i < choices_.size(); ++i)
    std::cerr << "auto: " << describe(choices_[i], input.links[i].costs) << std::endl;
  Assignment chosen;
  for (const auto& c : choices_)
    chosen.push_back(c.chosen);
  send_codecs(chosen);
  runoff_.reset();
  if (auto plan = plan_runoff(input, choices_, runoff_window_)) {
    runoff_.emplace(std::move(*plan), runoff_pairs_for(predict_step_s(input, chosen)));
  }
}

void LinkTuner::send_codecs(const Assignment& assignment) {
  comm::Group& g = wire_.group();
  // Both ends of a link learn its codec: the receiver sizes its buffers with it.
  std::vector<nlohmann::json> codecs(static_cast<size_t>(g.size()), nlohmann::json::array());
  for (size_t i = 0; i < choices_.size(); ++i) {
    const LinkChoice& c = choices_[i];
    const nlohmann::json link = {c.src, c.dst, compress::to_string(candidates_[assignment.at(i)])};
    codecs[static_cast<size_t>(c.src)].push_back(link);
    codecs[static_cast<size_t>(c.dst)].push_back(link);
  }
  for (int r = 1; r < g.size(); ++r) {
    const std::string text = codecs[static_cast<size_t>(r)].dump();
    g.isend_bytes(std::vector<uint8_t>(text.begin(), text.end()), r,
                  StageTransport::tuning_tag(kCodecs))
        .wait();
  }
  apply(codecs[0]);
  applied_ = assignment;
}

void LinkTuner::switch_to(const Assignment& assignment) {
  if (assignment == applied_) return;
  wire_.send_command({CommandKind::kSetCodecs, 0, 0});
  send_codecs(assignment);
}

void LinkTuner::before_step() {
  if (runoff_) switch_to(runoff_->next());
}

void LinkTuner::after_step(double seconds, int64_t samples) {
  if (!runoff_) return;
  runoff_->record(seconds, samples);
  if (!runoff_->decided()) return;
  const auto measured = runoff_->summary();
  const RunoffPlan plan = runoff_->plan();
  const bool b_wins = runoff_prefers_b(plan, measured);
  std::cerr << "auto: " << settle_runoff(plan, measured, b_wins, candidates_, choices_)
            << std::endl;
  runoff_.reset();
  switch_to(b_wins ? plan.b : plan.a);
}

void LinkTuner::end_epoch() {
  if (!runoff_) return;
  const RunoffPlan plan = runoff_->plan();
  std::cerr << "auto: the epoch ended before the runoff (" << runoff_->summary().pairs << " of "
            << runoff_->pairs() << " pairs): the prediction's choice stays" << std::endl;
  runoff_.reset();
  switch_to(plan.a);
}

std::vector<metrics::Row> LinkTuner::rows() const {
  std::vector<metrics::Row> out;
  for (const auto& c : choices_)
    out.push_back(to_row(c, candidates_));
  return out;
}

}  // namespace dtrain::parallel::pipeline
