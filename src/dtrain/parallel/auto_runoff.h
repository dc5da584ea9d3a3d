// `--compress auto` checks its own prediction by measurement. The model of auto_codec.h
// assumes how well the wire overlaps compute, which a machine may not give (2 shared cores,
// say): when another candidate's predicted step is within the runoff window
// (AutoCompress::runoff_window, --compress-runoff) of the chosen one's, the next training
// steps alternate the chosen assignment (A) and that one (B) in ABBA order
// (metrics/alternating_cost.h, first pair warm-up) and, after 3 to 16 more pairs
// (runoff_pairs_for), the faster as measured is kept. Both assignments are trained with: the steps
// are not spent. The prediction's preference holds for measurements too: the lossier side must be
// faster by more than kRunoffTie (auto_codec.h's kPreferenceMargin) and by more than the 95 %
// interval of the measured difference, else the less lossy side wins.
//
// Nothing here talks to ranks or reads clocks: the tuners (link_tuner.h for the pipeline's
// driver, ddp_codec_tuner.h for DDP's rank 0) feed the step times in and apply the
// assignment next() gives before each step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dtrain/metrics/alternating_cost.h"
#include "dtrain/parallel/auto_codec.h"

namespace dtrain::parallel {

inline constexpr double kRunoffTie = kPreferenceMargin;
// Counted pairs: as many as fill about kRunoffSeconds at the predicted step time, so that
// short, noisy steps get more of them; at least kRunoffMinPairs, at most kRunoffMaxPairs.
inline constexpr int64_t kRunoffMinPairs = 3;
inline constexpr int64_t kRunoffMaxPairs = 16;
inline constexpr double kRunoffSeconds = 1.0;
int64_t runoff_pairs_for(double predicted_step_s);

// A candidate index per link (in LinkChoice order).
using Assignment = std::vector<size_t>;

struct RunoffPlan {
  Assignment a;  // the prediction's choice
  // The closest rival of all (the least predicted step within the window; a candidate the
  // preference margin passed over comes first) says which way B moves: more compression or
  // less. Each link takes its closest rival that way, or keeps a's.
  Assignment b;
};

// Only links whose wire time (bytes over rate, with the chosen codec) is at least this share
// of the predicted step are run off: elsewhere (loopback) the candidates differ by their
// coding costs alone, which the prediction times exactly, and a measurement of a few steps
// would only see noise.
inline constexpr double kRunoffMinWireShare = 0.1;

// `choices`: choose_codecs(input). nullopt when no link that qualifies has another
// candidate predicted within `window` of its choice, or when `window` is 0.
std::optional<RunoffPlan> plan_runoff(const AutoInput& input,
                                      const std::vector<LinkChoice>& choices, double window);

class Runoff {
 public:
  Runoff(RunoffPlan plan, int64_t pairs);
  int64_t pairs() const { return pairs_; }
  const RunoffPlan& plan() const { return plan_; }
  // The assignment the next training step must run with.
  const Assignment& next() const;
  // The step just run with next(): its seconds and samples.
  void record(double seconds, int64_t samples);
  // After the warm-up pair and `pairs` more, counted or not (a pair of unequal batches is
  // not): a count of steps, so that ranks that each time their own steps agree on it.
  bool decided() const { return steps_.steps() >= 2 * (pairs_ + 1); }
  // "off" is A, "on" is B.
  metrics::AlternatingCost::Summary summary() const { return steps_.summary(); }

 private:
  RunoffPlan plan_;
  int64_t pairs_;
  metrics::AlternatingCost steps_;
};

// Whether the measurement favours B. Where B is the less lossy side (no link on a later
// candidate than A's): unless it is slower by more than `tie`. Else: if it is faster by
// more than `tie` and than the measurement's 95 % interval. No counted pair: A.
bool runoff_prefers_b(const RunoffPlan& plan, const metrics::AlternatingCost::Summary& measured,
                      double tie = kRunoffTie);

// Writes the outcome into the choices (chosen, and, on the links whose codec differs between
// the two assignments, what was measured: LinkChoice::runoff) and says it in one line: "runoff over
// 3 pairs: sortquant:12 0.998 s, sortquant:8 0.851 s per step: sortquant:8".
std::string settle_runoff(const RunoffPlan& plan, const metrics::AlternatingCost::Summary& measured,
                          bool b_wins, const std::vector<compress::CodecSpec>& candidates,
                          std::vector<LinkChoice>& choices);

}  // namespace dtrain::parallel
