#include "dtrain/parallel/auto_runoff.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

namespace dtrain::parallel {

std::optional<RunoffPlan> plan_runoff(const AutoInput& input,
                                      const std::vector<LinkChoice>& choices, double window) {
  if (!(window > 0)) return std::nullopt;  // the prediction is trusted
  // The candidates of link i worth running off: within the window, on a link whose wire
  // time counts; gap = how much slower than the choice they are predicted (negative for
  // those the preference margin passed over, which come first).
  const auto rivals = [&](size_t i, const auto& visit) {
    const LinkChoice& c = choices[i];
    const LinkMeasurement& link = input.links.at(i);
    const double chosen_s = c.predicted_step_s.at(c.chosen);
    if (link.costs.at(c.chosen).bytes / link.rate_bytes_per_s < kRunoffMinWireShare * chosen_s)
      return;
    for (size_t k = 0; k < c.predicted_step_s.size(); ++k) {
      const double gap = c.predicted_step_s[k] - chosen_s;
      if (k != c.chosen && gap <= window * chosen_s) visit(k, gap);
    }
  };
  // The closest rival of all (the least gap) says which way to move (more or less
  // compression); every link then moves to its closest rival that way, so that B tests one
  // hypothesis (two links trading places would leave the step as it was).
  std::optional<std::pair<size_t, size_t>> closest;  // (link, candidate)
  double closest_gap = 0;
  for (size_t i = 0; i < choices.size(); ++i) {
    rivals(i, [&](size_t k, double gap) {
      if (!closest || gap < closest_gap) closest = {{i, k}}, closest_gap = gap;
    });
  }
  if (!closest) return std::nullopt;
  const bool more_compression = closest->second > choices[closest->first].chosen;
  RunoffPlan plan;
  for (size_t i = 0; i < choices.size(); ++i) {
    const size_t chosen = choices[i].chosen;
    size_t best = chosen;
    double best_gap = 0;
    rivals(i, [&](size_t k, double gap) {
      if ((k > chosen) != more_compression) return;
      if (best == chosen || gap < best_gap) best = k, best_gap = gap;
    });
    plan.a.push_back(chosen);
    plan.b.push_back(best);
  }
  return plan;
}

int64_t runoff_pairs_for(double predicted_step_s) {
  if (!(predicted_step_s > 0)) return kRunoffMaxPairs;
  const double fill = std::ceil(kRunoffSeconds / (2 * predicted_step_s));
  return static_cast<int64_t>(
      std::clamp(fill, static_cast<double>(kRunoffMinPairs), static_cast<double>(kRunoffMaxPairs)));
}

Runoff::Runoff(RunoffPlan plan, int64_t pairs) : plan_(std::move(plan)), pairs_(pairs) {}

const Assignment& Runoff::next() const {
  return steps_.next_on() ? plan_.b : plan_.a;
}

void Runoff::record(double seconds, int64_t samples) {
  steps_.record(seconds, samples);
}

bool runoff_prefers_b(const RunoffPlan& plan, const metrics::AlternatingCost::Summary& measured,
                      double tie) {
  if (measured.pairs == 0) return false;
  bool b_less_lossy = true;
  for (size_t i = 0; i < plan.a.size(); ++i)
    b_less_lossy = b_less_lossy && plan.b[i] <= plan.a[i];
  if (b_less_lossy) return measured.cost <= tie;
  return measured.cost < -tie && measured.cost + measured.cost_ci95 < 0;
}

namespace {

std::string codecs_of(const Assignment& a, const std::vector<compress::CodecSpec>& candidates) {
  std::string out;
  for (const size_t k : a)
    out += (out.empty() ? "" : "+") + compress::to_string(candidates.at(k));
  return out;
}

}  // namespace

std::string settle_runoff(const RunoffPlan& plan, const metrics::AlternatingCost::Summary& measured,
                          bool b_wins, const std::vector<compress::CodecSpec>& candidates,
                          std::vector<LinkChoice>& choices) {
  for (size_t i = 0; i < choices.size(); ++i) {
    choices[i].chosen = b_wins ? plan.b[i] : plan.a[i];
    // A link on the same codec in both assignments has no two codecs to put times on.
    if (plan.a[i] != plan.b[i])
      choices[i].runoff =
          RunoffResult{measured.pairs, plan.a[i], plan.b[i], measured.off_s, measured.on_s};
  }
  char line[256];
  std::snprintf(line, sizeof(line), "runoff over %lld pairs: %s %.4f s, %s %.4f s per step: %s",
                static_cast<long long>(measured.pairs), codecs_of(plan.a, candidates).c_str(),
                measured.off_s, codecs_of(plan.b, candidates).c_str(), measured.on_s,
                codecs_of(b_wins ? plan.b : plan.a, candidates).c_str());
  return line;
}

}  // namespace dtrain::parallel
