// The cost of a switch (the wire check, say) measured inside one run, where the drift
// between two runs on a shared machine is larger than the effect. Steps alternate in the
// order off, on, on, off, off, on, ... (ABBA): steps 2k and 2k+1 form a pair, one off and
// one on, and the on step comes second in every other pair, so neither a slow drift nor
// the order within a pair favours either side.
//
// cost = mean over pairs of (on - off) / mean off step time; its 95 % interval is
// 1.96 standard errors of that mean (the pairs' differences), so a cost inside it is not
// told apart from zero. The first pair after reset() is warm-up and not counted; a pair
// whose steps had different sample counts (an epoch's short last batch) is not counted.
#pragma once

#include <cstdint>
#include <vector>

namespace dtrain::metrics {

class AlternatingCost {
 public:
  // The state the next step must run in.
  bool next_on() const;
  // The step just run (in the state next_on() gave): its seconds and samples.
  void record(double seconds, int64_t samples);
  // Steps recorded since reset(), counted or not.
  int64_t steps() const { return static_cast<int64_t>(steps_.size()); }
  void reset();

  struct Summary {
    int64_t pairs = 0;
    double off_s = 0, on_s = 0;  // mean step time of each side over the counted pairs
    double cost = 0;             // (on - off) / off
    double cost_ci95 = 0;        // half-width; 0 with fewer than 2 pairs
  };
  Summary summary() const;

 private:
  struct Step {
    double seconds;
    int64_t samples;
  };
  std::vector<Step> steps_;
};

}  // namespace dtrain::metrics
