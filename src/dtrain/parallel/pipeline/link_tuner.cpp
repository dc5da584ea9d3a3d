#include "dtrain/parallel/pipeline/link_tuner.h"

#include <ATen/ATen.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <iostream>
#include <set>

#include "dtrain/comm/group.h"
#include "dtrain/metrics/keys.h"
#include "dtrain/metrics/timer.h"
#include "dtrain/parallel/pipeline/transport.h"

namespace dtrain::parallel::pipeline {
namespace {

using metrics::Clock;
using metrics::since;
namespace key = metrics::key;

// Two message sizes: the difference of their times is the time of (large - small) bytes on
// the wire, free of latency, of the peer's reply and of a token bucket's initial burst.
constexpr int64_t kProbeSmallBytes = 256 * 1024, kProbeLargeBytes = 1024 * 1024;
constexpr int kProbeRepeats = 2;
enum Purpose { kPing = 0, kData = 1, kMeasurements = 2, kCodecs = 3 };

struct Probe {
  double rtt_s = 1e30;
  double out_s[2] = {1e30, 1e30}, in_s[2] = {1e30, 1e30};  // small, large message
};

// The initiator times each exchange; the responder mirrors it.
Probe probe(comm::Group& g, int peer, bool initiator) {
  at::Tensor ping = at::zeros({8}, at::kByte);
  at::Tensor data[2] = {at::zeros({kProbeSmallBytes}, at::kByte),
                        at::zeros({kProbeLargeBytes}, at::kByte)};
  const int ping_tag = StageTransport::tuning_tag(kPing);
  const int data_tag = StageTransport::tuning_tag(kData);
  Probe p;
  auto exchange = [&](at::Tensor& out, int out_tag, at::Tensor& in, int in_tag) {
    const auto t0 = Clock::now();
    if (initiator) {
      g.send(out, peer, out_tag);
      g.recv(in, peer, in_tag);
    } else {
      g.recv(out, peer, out_tag);
      g.send(in, peer, in_tag);
    }
    return since(t0);
  };
  for (int rep = 0; rep < kProbeRepeats; ++rep) {
    p.rtt_s = std::min(p.rtt_s, exchange(ping, ping_tag, ping, ping_tag));
    for (int size = 0; size < 2; ++size) {
      p.out_s[size] = std::min(p.out_s[size], exchange(data[size], data_tag, ping, ping_tag));
      p.in_s[size] = std::min(p.in_s[size], exchange(ping, ping_tag, data[size], data_tag));
    }
  }
  return p;
}

double rate_of(const double (&seconds)[2]) {
  return static_cast<double>(kProbeLargeBytes - kProbeSmallBytes) /
         std::max(seconds[1] - seconds[0], 1e-7);
}

// Packet bytes, encode and decode seconds of one tensor under one codec (best of two).
CandidateCost cost_of(const compress::CodecSpec& spec, const at::Tensor& sample) {
  const auto codec = compress::make_codec(spec);
  CandidateCost c{spec, 0, 1e30, 1e30};
  for (int rep = 0; rep < 2; ++rep) {
    auto t0 = Clock::now();
    const auto packet = compress::encode(*codec, sample);
    c.encode_s = std::min(c.encode_s, since(t0));
    t0 = Clock::now();
    const at::Tensor back = compress::decode(packet);
    c.decode_s = std::min(c.decode_s, since(t0));
    c.bytes = static_cast<double>(packet.size());
  }
  return c;
}

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
  // Until the first decision every tuned link carries the first candidate.
  for (const auto& [a, b] : pairs_) {
    if (a == me) wire_.set_link_codec(b, candidates_.front());
    if (b == me) wire_.set_link_codec(a, candidates_.front());
  }
}

void LinkTuner::probe_pairs(nlohmann::json& out) {
  comm::Group& g = wire_.group();
  for (const auto& [a, b] : pairs_) {  // one global order: no two ranks wait on each other
    if (a != g.rank() && b != g.rank()) continue;
    const bool initiator = a == g.rank();
    const Probe p = probe(g, initiator ? b : a, initiator);
    if (!initiator) continue;
    out.push_back({{"src", a}, {"dst", b}, {"rate", rate_of(p.out_s)}, {"latency", p.rtt_s / 2}});
    out.push_back({{"src", b}, {"dst", a}, {"rate", rate_of(p.in_s)}, {"latency", p.rtt_s / 2}});
  }
}

nlohmann::json LinkTuner::measure(const StageTimes& times) {
  nlohmann::json m{{"rank", wire_.group().rank()},
                   {"compute_s", (times.forward_s + times.backward_s) /
                                     static_cast<double>(std::max<int64_t>(1, times.steps))},
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
      const CandidateCost one = cost_of(candidates_[i], sent.sample);
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

void LinkTuner::calibrate_as_follower(const StageTimes& times) {
  comm::Group& g = wire_.group();
  const std::string text = measure(times).dump();
  g.isend_bytes(std::vector<uint8_t>(text.begin(), text.end()), 0,
                StageTransport::tuning_tag(kMeasurements))
      .wait();
  const auto reply = g.recv_bytes(0, StageTransport::tuning_tag(kCodecs), 1 << 20);
  apply(nlohmann::json::parse(reply.begin(), reply.end()));
}

void LinkTuner::calibrate_as_driver(const StageTimes& times, int micro_batches) {
  comm::Group& g = wire_.group();
  std::vector<nlohmann::json> all{measure(times)};
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
  for (size_t i = 0; i < choices_.size(); ++i) {
    const LinkChoice& c = choices_[i];
    metrics::Row by_codec = metrics::Row::object();
    for (size_t k = 0; k < candidates_.size(); ++k)
      by_codec[compress::to_string(candidates_[k])] = c.predicted_step_s[k];
    metrics::Row row;
    row[key::kSrc] = c.src;
    row[key::kDst] = c.dst;
    row[key::kRateMbps] = c.rate_bytes_per_s * 8 / 1e6;
    row[key::kCodec] = compress::to_string(candidates_[c.chosen]);
    row[key::kPredictedStepS] = c.predicted_step_s[c.chosen];
    row[key::kPredictedBy] = by_codec;
    out.push_back(row);
  }
  return out;
}

}  // namespace dtrain::parallel::pipeline
