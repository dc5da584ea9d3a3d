#include "dtrain/parallel/pipeline/link_tuner.h"

#include <ATen/ATen.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <iostream>
#include <set>

#include "dtrain/comm/group.h"
#include "dtrain/comm/link_probe.h"
#include "dtrain/metrics/keys.h"
#include "dtrain/parallel/codec_timing.h"
#include "dtrain/parallel/pipeline/transport.h"

namespace dtrain::parallel::pipeline {
namespace {

namespace key = metrics::key;

enum Purpose { kPing = 0, kData = 1, kMeasurements = 2, kCodecs = 3 };

}  // namespace

LinkTuner::LinkTuner(StageTransport& wire, const std::vector<int>& stage_rank,
                     const AutoCompress& options)
    : wire_(wire), candidates_(eligible_candidates(options)) {
  const int me = wire_.group().rank();
  std::set<std::pair<int, int>> pairs;
  for (size_t s = 0; s + 1 < stage_rank.size(); ++s) {
    const int a = std::min(stage_rank[s], stage_rank[s + 1]);
    const int b = std::max(stage_rank[s], stage_rank[s + 1]);
    // Both ends agree on compresses(): it depends on the pair only.
    const bool mine = a == me || b == me;
    if (a != b && (!mine || wire_.compresses(a == me ? b : a))) pairs.insert({a, b});
  }
  pairs_.assign(pairs.begin(), pairs.end());
  // Until the first decision every tuned link carries the most compressive candidate.
  for (const auto& [a, b] : pairs_) {
    if (a == me) wire_.set_link_codec(b, candidates_.back());
    if (b == me) wire_.set_link_codec(a, candidates_.back());
  }
}

void LinkTuner::probe_pairs(nlohmann::json& out) {
  comm::Group& g = wire_.group();
  for (const auto& [a, b] : pairs_) {  // one global order: no two ranks wait on each other
    if (a != g.rank() && b != g.rank()) continue;
    const bool initiator = a == g.rank();
    const comm::LinkProbe p =
        comm::probe_link(g, initiator ? b : a, initiator, StageTransport::tuning_tag(kPing),
                         StageTransport::tuning_tag(kData));
    if (!initiator) continue;
    out.push_back({{"src", a}, {"dst", b}, {"rate", p.out_bytes_per_s}, {"latency", p.latency_s}});
    out.push_back({{"src", b}, {"dst", a}, {"rate", p.in_bytes_per_s}, {"latency", p.latency_s}});
  }
}

nlohmann::json LinkTuner::measure(double compute_s) {
  const StageTimes& times = wire_.times();
  nlohmann::json m{{"rank", wire_.group().rank()},
                   {"compute_s", compute_s},
                   {"probes", nlohmann::json::array()},
                   {"links", nlohmann::json::array()}};
  probe_pairs(m["probes"]);
  const double steps = static_cast<double>(std::max<int64_t>(1, times.steps));
  std::map<int, std::vector<CandidateCost>> per_link;
  std::map<int, double> messages;
  for (const auto& [key, sent] : wire_.sent()) {
    const int dst = key.first;
    if (!wire_.compresses(dst)) continue;
    auto& costs = per_link[dst];
    costs.resize(candidates_.size(), CandidateCost{});
    for (size_t i = 0; i < candidates_.size(); ++i) {
      const CandidateCost one = time_codec(candidates_[i], sent.sample);
      const double per_step = static_cast<double>(sent.messages) / steps;
      costs[i].codec = candidates_[i];
      costs[i].bytes += one.bytes * per_step;
      costs[i].encode_s += one.encode_s * per_step;
      costs[i].decode_s += one.decode_s * per_step;
    }
    messages[dst] += static_cast<double>(sent.messages) / steps;
  }
  for (const auto& [dst, costs] : per_link) {
    nlohmann::json c = nlohmann::json::array();
    for (const auto& cost : costs)
      c.push_back(
          {{"bytes", cost.bytes}, {"encode_s", cost.encode_s}, {"decode_s", cost.decode_s}});
    m["links"].push_back({{"dst", dst}, {"messages", messages[dst]}, {"costs", c}});
  }
  return m;
}

void LinkTuner::apply(const nlohmann::json& codecs) {
  for (const auto& [dst, name] : codecs.items())
    wire_.set_link_codec(std::stoi(dst), compress::parse_codec(name.get<std::string>()));
}

void LinkTuner::calibrate_as_follower(double compute_s) {
  comm::Group& g = wire_.group();
  const std::string text = measure(compute_s).dump();
  g.isend_bytes(std::vector<uint8_t>(text.begin(), text.end()), 0,
                StageTransport::tuning_tag(kMeasurements))
      .wait();
  const auto reply = g.recv_bytes(0, StageTransport::tuning_tag(kCodecs), 1 << 20);
  apply(nlohmann::json::parse(reply.begin(), reply.end()));
}

void LinkTuner::calibrate_as_driver(double compute_s, int micro_batches) {
  comm::Group& g = wire_.group();
  std::vector<nlohmann::json> all{measure(compute_s)};
  for (int r = 1; r < g.size(); ++r) {
    const auto bytes = g.recv_bytes(r, StageTransport::tuning_tag(kMeasurements), 1 << 24);
    all.push_back(nlohmann::json::parse(bytes.begin(), bytes.end()));
  }
  AutoInput input;
  input.micro_batches = micro_batches;
  std::map<std::pair<int, int>, std::pair<double, double>> probes;  // rate, latency
  for (const auto& m : all) {
    input.compute_s.push_back(m.at("compute_s").get<double>());
    for (const auto& p : m.at("probes"))
      probes[{p.at("src").get<int>(), p.at("dst").get<int>()}] = {p.at("rate").get<double>(),
                                                                  p.at("latency").get<double>()};
  }
  choice_costs_.clear();
  for (const auto& m : all) {
    for (const auto& l : m.at("links")) {
      LinkMeasurement lm;
      lm.src = m.at("rank").get<int>();
      lm.dst = l.at("dst").get<int>();
      const auto probe = probes.at({lm.src, lm.dst});
      lm.rate_bytes_per_s = probe.first;
      lm.latency_s = probe.second;
      lm.messages = l.at("messages").get<double>();
      const auto& costs = l.at("costs");
      for (size_t i = 0; i < candidates_.size(); ++i)
        lm.costs.push_back({candidates_[i], costs.at(i).at("bytes").get<double>(),
                            costs.at(i).at("encode_s").get<double>(),
                            costs.at(i).at("decode_s").get<double>()});
      choice_costs_.push_back(lm.costs);
      input.links.push_back(std::move(lm));
    }
  }
  choices_ = choose_codecs(input);
  std::vector<nlohmann::json> codecs(static_cast<size_t>(g.size()), nlohmann::json::object());
  for (size_t i = 0; i < choices_.size(); ++i) {
    const LinkChoice& c = choices_[i];
    codecs[static_cast<size_t>(c.src)][std::to_string(c.dst)] =
        compress::to_string(candidates_[c.chosen]);
    std::cerr << "auto: " << describe(c, choice_costs_[i]) << std::endl;
  }
  for (int r = 1; r < g.size(); ++r) {
    const std::string text = codecs[static_cast<size_t>(r)].dump();
    g.isend_bytes(std::vector<uint8_t>(text.begin(), text.end()), r,
                  StageTransport::tuning_tag(kCodecs))
        .wait();
  }
  apply(codecs[0]);
}

std::vector<metrics::Row> LinkTuner::rows() const {
  std::vector<metrics::Row> out;
  for (const auto& c : choices_)
    out.push_back(to_row(c, candidates_));
  return out;
}

}  // namespace dtrain::parallel::pipeline
