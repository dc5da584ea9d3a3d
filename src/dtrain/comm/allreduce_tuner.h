// `--algo auto` by measurement: the algorithm an all-reduce runs is the one that was fastest
// on this group, for this kind of call, when the ranks timed them all.
//
// A kind of call is (channel tag, dtype, op, size class: the bytes' power of two); the world
// size, device and links are the group's. The first call of a kind times every candidate
// (ring, butterfly, direct, exchange, native) on copies of that call's data, taking turns
// (ABCDE EDCBA ...; 16 turns up to 1 MiB, 4 up to 16 MiB, 2 above, fewer once the turns took
// kCalibrationBudgetS: slow calls are steady; at least kMinCalibrationTurns where a turn
// takes under kSlowTurnS) and keeping each one's median; a
// candidate's time is the slowest rank's, so every rank reaches the same choice from the
// same numbers. A candidate's turn is a block of calls in a row, the first untimed, so that
// no candidate pays for the one before it (caches, the ranks' skew, connections TCP restarts
// after idling) and each is timed as the calls after the calibration run: kBlockTimedCalls
// timed calls up to kBlockMaxBytes, 2 on a long link (a round trip of kLongRttSeconds or
// more) at every size; above kBlockMaxBytes on a short link one timed call a turn, each
// candidate's first call untimed (it pays for buffers later calls reuse). Where the two fastest are
// within kRunoffMargin (10 %), they run off: kRunoffTurns more turns of those two alone, and the
// medians of all their samples decide. Later calls of the kind run the choice. Every kRecheckCalls
// calls of a kind the ranks compare the median time of those calls (the slowest rank's) with the
// kind's steady time, the first check's (one small all-reduce); a change of more than half either
// way at two checks in a row (the link was reshaped, the machine is busier) calibrates the kind
// again, once the time those checks drifted by would have paid for the calibration
// (recalibrates()). Medians, the second look and the price keep noisy stretches of small calls,
// whose times vary by 2x on a busy machine, from paying for calibrations they do not need.
//
// With the wire check on, native (Gloo's own, whose messages carry no check) is chosen only
// where it beats every checked candidate by more than kNativeMargin (5 %).
//
// Choices can outlive the run: comm/auto_cache.h keeps them in a file per topology
// (DTRAIN_AUTO_CACHE), so a later run on the same hosts and links skips the calibration.
//
// Contract: every rank runs the same kinds in the same order on a channel (each channel is
// one thread's: DDP's buckets, SyncBatchNorm's statistics), as every collective requires.
// Results are bitwise the same on every rank; with 3 ranks or more two algorithms add in
// other orders, so a run whose choice changes is not bitwise the run before it (a fixed
// --algo is).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "dtrain/comm/allreduce.h"

namespace dtrain::comm {

class AllReduceTuner {
 public:
  static constexpr int kRecheckCalls = 100;
  static constexpr double kNativeMargin = 0.05;
  // A calibration takes no more turns once its turns took this long (every rank agrees):
  // on a link of 25 ms one way, one turn of the four candidates at 1 MiB takes 0.3-0.6 s.
  static constexpr double kCalibrationBudgetS = 0.25;
  // ... once it has taken kMinCalibrationTurns, unless a turn took kSlowTurnS or more.
  static constexpr int kMinCalibrationTurns = 3;
  static constexpr double kSlowTurnS = 2.0;
  // Then, where the two fastest are within kRunoffMargin of each other, they take
  // kRunoffTurns more turns between themselves before the choice, if those would take no
  // more than kRunoffBudgetS (large calls on a slow link take seconds each).
  static constexpr double kRunoffMargin = 0.10;
  static constexpr int kRunoffTurns = 4;
  static constexpr double kRunoffBudgetS = 4.0;
  // A sample of a call of at most kBlockMaxBytes is a block of calls in a row: one untimed,
  // then kBlockTimedCalls timed (2 on a long link, every size), their mean.
  static constexpr int64_t kBlockMaxBytes = int64_t{16} << 20;
  static constexpr int kBlockTimedCalls = 3;

  // What a kind was calibrated to, for reports (bench collective's `chosen`).
  struct Choice {
    Algorithm algorithm = Algorithm::kRing;
    double seconds = 0;                      // its median at calibration (slowest rank)
    std::map<Algorithm, double> candidates;  // every candidate's
    int calibrations = 0;                    // in this run
    bool from_cache = false;                 // taken from an earlier run (auto_cache.h)
    // What calibrating the kind again would cost: every candidate's median times the calls
    // a candidate made (from a cache file without it: kMinCalibrationTurns calls).
    double calibration_s = 0;
  };

  // The re-check's rule, apart so that it can be tested. The first check after a calibration
  // takes its median (the slowest rank's, of the last kRecheckCalls calls) as the kind's
  // steady time: calls in a row run at another speed than calls between other candidates
  // (2x apart for 4 KiB on 2 shared cores), so later checks compare with it, not with the
  // calibration; only a first check beyond kFirstCheckBand of the calibration (a link
  // reshaped right after it) calibrates again at once. A later check more than kDriftBand
  // off the steady time, either way, adds the difference times kRecheckCalls to `seconds`;
  // one in band clears it. The kind is calibrated again (true; `drift` cleared) once two
  // checks in a row drifted and what they add up to would have paid for the calibration
  // (choice.calibration_s): noise on small calls does not pay for one.
  static constexpr double kFirstCheckBand = 3.0;
  static constexpr double kDriftBand = 1.5;
  struct Drift {
    double reference_s = 0;  // the steady time (0: no check since the calibration)
    int checks = 0;          // checks in a row out of band
    double seconds = 0;      // their differences, times kRecheckCalls
  };
  static bool recalibrates(Drift& drift, double recent_median_s, const Choice& choice);

  // Runs an all-reduce of `options` (algorithm kAuto) on `flat` by `run_one` (one concrete
  // algorithm on a tensor): calibrating first where its kind is new or has drifted.
  using RunOne = std::function<void(Algorithm, at::Tensor&)>;
  void all_reduce(Group& group, at::Tensor& flat, const AllReduceOptions& options,
                  const RunOne& run_one);

  // The choice for this kind of call, if calibrated (bench reports).
  const Choice* choice(int tag, at::ScalarType dtype, ReduceOp op, int64_t bytes) const;

  // Choices across runs (comm/auto_cache.h). export_choices: every calibrated kind as JSON.
  // import_choices: kinds of `json` (export_choices' format) start from those choices, not a
  // calibration (the re-check still re-calibrates a kind whose calls drift); every rank
  // must import the same text. Throws std::runtime_error naming what is malformed, having
  // imported nothing. on_calibrated: `save` gets export_choices() after each calibration.
  std::string export_choices() const;
  void import_choices(const std::string& json);
  void on_calibrated(std::function<void(const std::string&)> save);

 private:
  using Kind = std::tuple<int, int, int, int>;  // tag, dtype, op, log2 class
  struct State {
    Choice choice;
    std::vector<double> recent_s;  // this rank's time of each call since the last check
    Drift drift;
  };
  static Kind kind_of(int tag, at::ScalarType dtype, ReduceOp op, int64_t bytes);
  // Times every candidate on copies of `flat` and keeps the fastest (collective).
  Choice calibrate(Group& group, const at::Tensor& flat, const RunOne& run_one) const;
  // The fastest checked candidate by `seconds` (each candidate's), or native where it is
  // faster by kNativeMargin (by any margin without the wire check).
  static Choice choose(const std::vector<Algorithm>& candidates, const std::vector<double>& seconds,
                       bool wire_check);
  static int take_turns(Group& group, int turns, size_t n,
                        const std::function<void(size_t)>& time_one);

  mutable std::mutex mutex_;  // the map and the choices: a kind is one channel's, one thread's
  std::map<Kind, State> states_;
  std::function<void(const std::string&)> save_;
};

}  // namespace dtrain::comm
