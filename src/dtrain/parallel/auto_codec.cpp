#include "dtrain/parallel/auto_codec.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "dtrain/metrics/keys.h"

namespace dtrain::parallel {
namespace {

constexpr size_t kMaxCombinations = 4096;

size_t combinations(const AutoInput& input) {
  size_t n = 1;
  for (const auto& l : input.links) {
    n *= std::max<size_t>(1, l.costs.size());
    if (n > kMaxCombinations) return n;
  }
  return n;
}

// Advances `choice` like an odometer; false after the last combination.
bool next(std::vector<size_t>& choice, const AutoInput& input) {
  for (size_t i = 0; i < choice.size(); ++i) {
    if (++choice[i] < input.links[i].costs.size()) return true;
    choice[i] = 0;
  }
  return false;
}

}  // namespace

std::vector<compress::CodecSpec> default_auto_candidates() {
  // The rotated low-bit codecs only where the user lowers --compress-min-bits to allow them.
  return {compress::parse_codec("none"),         compress::parse_codec("fp16"),
          compress::parse_codec("sortquant:12"), compress::parse_codec("sortquant:8"),
          compress::parse_codec("rot:tile:4"),   compress::parse_codec("rot:tile:2")};
}

std::vector<compress::CodecSpec> eligible_candidates(const AutoCompress& options) {
  std::vector<compress::CodecSpec> out;
  for (const auto& c : options.candidates)
    if (c.bits >= options.min_bits) out.push_back(c);
  if (out.empty()) {
    throw std::invalid_argument("--compress auto: no candidate has at least " +
                                std::to_string(options.min_bits) +
                                " bits per value (--compress-candidates, --compress-min-bits)");
  }
  return out;
}

double predict_step_s(const AutoInput& input, const std::vector<size_t>& choice) {
  const double m = std::max(1, input.micro_batches);
  std::vector<double> rank_s;
  for (const double c : input.compute_s)
    rank_s.push_back(c / m);
  std::vector<double> link_s;
  for (size_t i = 0; i < input.links.size(); ++i) {
    const LinkMeasurement& l = input.links[i];
    const CandidateCost& c = l.costs.at(choice.at(i));
    const double messages = l.messages / m;
    link_s.push_back(c.bytes / m / l.rate_bytes_per_s + l.latency_s * messages);
    if (l.src >= 0 && static_cast<size_t>(l.src) < rank_s.size()) rank_s[l.src] += c.encode_s / m;
    if (l.dst >= 0 && static_cast<size_t>(l.dst) < rank_s.size()) rank_s[l.dst] += c.decode_s / m;
  }
  double sum = 0, largest = 0;
  for (const auto* costs : {&rank_s, &link_s}) {
    for (const double t : *costs) {
      sum += t;
      largest = std::max(largest, t);
    }
  }
  return sum + (m - 1) * largest;
}

std::vector<LinkChoice> choose_codecs(const AutoInput& input) {
  for (const auto& l : input.links) {
    if (l.costs.empty()) throw std::invalid_argument("auto codec: a link without candidates");
    if (!(l.rate_bytes_per_s > 0)) throw std::invalid_argument("auto codec: a link without a rate");
  }
  std::vector<size_t> best(input.links.size(), 0);
  double best_s = predict_step_s(input, best);
  if (combinations(input) <= kMaxCombinations) {
    for (std::vector<size_t> c(best.size(), 0); next(c, input);) {
      const double s = predict_step_s(input, c);
      if (s < best_s) best_s = s, best = c;
    }
  } else {
    for (bool improved = true; improved;) {
      improved = false;
      for (size_t i = 0; i < best.size(); ++i) {
        std::vector<size_t> c = best;
        for (c[i] = 0; c[i] < input.links[i].costs.size(); ++c[i]) {
          const double s = predict_step_s(input, c);
          if (s < best_s) best_s = s, best = c, improved = true;
        }
      }
    }
  }
  std::vector<LinkChoice> out;
  for (size_t i = 0; i < input.links.size(); ++i) {
    LinkChoice choice{
        input.links[i].src, input.links[i].dst, input.links[i].rate_bytes_per_s, best[i], {}, {}};
    std::vector<size_t> c = best;
    for (c[i] = 0; c[i] < input.links[i].costs.size(); ++c[i])
      choice.predicted_step_s.push_back(predict_step_s(input, c));
    // Candidates come in preference order (least lossy first): a later one must earn its
    // loss with a clear gain, so near-ties (loopback) keep the exact codec.
    const double bar = choice.predicted_step_s[best[i]] * (1 + kPreferenceMargin);
    for (size_t k = 0; k < best[i]; ++k) {
      if (choice.predicted_step_s[k] <= bar) {
        choice.chosen = k;
        break;
      }
    }
    out.push_back(choice);
  }
  return out;
}

metrics::Row to_row(const LinkChoice& choice, const std::vector<compress::CodecSpec>& candidates) {
  namespace key = metrics::key;
  metrics::Row by_codec = metrics::Row::object();
  for (size_t k = 0; k < candidates.size(); ++k)
    by_codec[compress::to_string(candidates[k])] = choice.predicted_step_s.at(k);
  metrics::Row row;
  row[key::kSrc] = choice.src;
  row[key::kDst] = choice.dst;
  row[key::kRateMbps] = choice.rate_bytes_per_s * 8 / 1e6;
  row[key::kRateFrom] = choice.rate_from;
  row[key::kCodec] = compress::to_string(candidates.at(choice.chosen));
  row[key::kPredictedStepS] = choice.predicted_step_s.at(choice.chosen);
  row[key::kPredictedBy] = by_codec;
  if (choice.runoff) {
    const RunoffResult& r = *choice.runoff;
    metrics::Row measured = metrics::Row::object();
    measured[compress::to_string(candidates.at(r.a))] = r.a_step_s;
    measured[compress::to_string(candidates.at(r.b))] = r.b_step_s;
    row[key::kRunoffPairs] = r.pairs;
    row[key::kMeasuredBy] = measured;
  }
  return row;
}

std::string describe(const LinkChoice& choice, const std::vector<CandidateCost>& costs) {
  char head[160];
  std::snprintf(head, sizeof(head), "link %d->%d at %.1f Mbit/s: %s (predicted step %.4f s",
                choice.src, choice.dst, choice.rate_bytes_per_s * 8 / 1e6,
                compress::to_string(costs.at(choice.chosen).codec).c_str(),
                choice.predicted_step_s.at(choice.chosen));
  std::string out = head;
  for (size_t i = 0; i < costs.size(); ++i) {
    if (i == choice.chosen) continue;
    char part[96];
    std::snprintf(part, sizeof(part), "; %s %.4f s", compress::to_string(costs[i].codec).c_str(),
                  choice.predicted_step_s.at(i));
    out += part;
  }
  return out + ")";
}

}  // namespace dtrain::parallel
