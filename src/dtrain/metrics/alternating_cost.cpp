#include "dtrain/metrics/alternating_cost.h"

#include <cmath>

namespace dtrain::metrics {

namespace {
// off, on, on, off, off, on, on, off, ...
bool is_on(size_t step) {
  return ((step + 1) / 2) % 2 == 1;
}
}  // namespace

bool AlternatingCost::next_on() const {
  return is_on(steps_.size());
}

void AlternatingCost::record(double seconds, int64_t samples) {
  steps_.push_back({seconds, samples});
}

void AlternatingCost::reset() {
  steps_.clear();
}

AlternatingCost::Summary AlternatingCost::summary() const {
  std::vector<double> offs, diffs;
  for (size_t first = 2; first + 1 < steps_.size(); first += 2) {
    const Step& a = steps_[first];
    const Step& b = steps_[first + 1];
    if (a.samples != b.samples) continue;
    const double on = is_on(first) ? a.seconds : b.seconds;
    const double off = is_on(first) ? b.seconds : a.seconds;
    offs.push_back(off);
    diffs.push_back(on - off);
  }
  Summary s;
  s.pairs = static_cast<int64_t>(diffs.size());
  if (diffs.empty()) return s;
  const double n = static_cast<double>(diffs.size());
  double off_sum = 0, diff_sum = 0;
  for (size_t i = 0; i < diffs.size(); ++i) {
    off_sum += offs[i];
    diff_sum += diffs[i];
  }
  const double diff_mean = diff_sum / n;
  s.off_s = off_sum / n;
  s.on_s = s.off_s + diff_mean;
  s.cost = s.off_s > 0 ? diff_mean / s.off_s : 0;
  if (diffs.size() >= 2 && s.off_s > 0) {
    double squares = 0;
    for (const double d : diffs)
      squares += (d - diff_mean) * (d - diff_mean);
    const double standard_error = std::sqrt(squares / (n - 1) / n);
    s.cost_ci95 = 1.96 * standard_error / s.off_s;
  }
  return s;
}

}  // namespace dtrain::metrics
