#include "dtrain/comm/allreduce_tuner.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include <nlohmann/json.hpp>

#include "dtrain/base/median.h"
#include "dtrain/comm/group.h"
#include "dtrain/comm/world.h"

namespace dtrain::comm {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

AllReduceTuner::Kind AllReduceTuner::kind_of(int tag, at::ScalarType dtype, ReduceOp op,
                                             int64_t bytes) {
  int log2 = 0;
  while ((int64_t{1} << (log2 + 1)) <= bytes)
    ++log2;
  return {tag, static_cast<int>(dtype), static_cast<int>(op), log2};
}

// Runs up to `turns` turns of the n candidates by time_one, alternating the order (ABCD
// DCBA ...: a drift hits every candidate alike), and returns how many it ran. Calls this
// slow are steady (a long link's round trips, a large message): the ranks stop together
// once the turns so far took kCalibrationBudgetS (the slowest rank's), but not before
// kMinCalibrationTurns where a turn takes under kSlowTurnS: one sample a candidate let one
// slow call (a connection TCP restarts after idling) decide.
int AllReduceTuner::take_turns(Group& group, int turns, size_t n,
                               const std::function<void(size_t)>& time_one) {
  const auto began = Clock::now();
  for (int turn = 0; turn < turns; ++turn) {
    for (size_t i = 0; i < n; ++i)
      time_one(turn % 2 == 0 ? i : n - 1 - i);
    if (turn + 1 == turns) break;
    at::Tensor spent = at::full({1}, seconds_since(began), at::kDouble);
    group.native_all_reduce(spent, ReduceOp::kMax);
    const double s = spent.item<double>();
    const bool enough = turn + 1 >= kMinCalibrationTurns || s / (turn + 1) > kSlowTurnS;
    if (s >= kCalibrationBudgetS && enough) return turn + 1;
  }
  return turns;
}

AllReduceTuner::Choice AllReduceTuner::calibrate(Group& group, const at::Tensor& flat,
                                                 const RunOne& run_one) const {
  const auto& candidates = concrete_algorithms();
  const size_t n = candidates.size();
  // Small calls are noisy and cheap, so they take more turns (the same number on every rank): at
  // 64 KiB on 2 shared cores the same algorithm's mean varies by 2x from run to run, and
  // 6 turns picked candidates 15-25 % slower than the best (measured 2026-11-26).
  const int64_t bytes = flat.numel() * flat.element_size();
  const int turns = bytes <= (int64_t{1} << 20) ? 16 : bytes <= (int64_t{16} << 20) ? 4 : 2;
  std::vector<std::vector<double>> times(n);
  at::Tensor trial = at::empty_like(flat);
  // A sample is a block of one candidate's calls in a row, the first untimed: later calls run
  // the choice in a row, and a first call after another candidate pays for the switch (at
  // 1 MiB on 2 shared cores native read 445-522 us between the others, 330-390 in a row). On
  // a long link the switch costs more (the ranks' skew, connections TCP restarts after idling;
  // exchange at 256 KiB 25 ms apart: 151 ms cold, 52 warm), and the sample is a mean because
  // with openings the ranks take turns finishing first (docs/results.md, "Collectives and
  // links"). Above kBlockMaxBytes on a short link one call a sample: the
  // switch is small beside the call, and blocks would double a calibration of seconds.
  const bool long_link = on_a_long_link(group);
  const bool in_blocks = long_link || bytes <= kBlockMaxBytes;
  const int timed_calls = long_link ? 2 : in_blocks ? kBlockTimedCalls : 1;
  // One call of candidate c on a fresh copy of the call's data, untimed or timed.
  const auto untimed = [&](size_t c) {
    trial.copy_(flat);
    run_one(candidates[c], trial);
  };
  const auto time_one = [&](size_t c) {
    if (in_blocks) untimed(c);
    double seconds = 0;
    for (int i = 0; i < timed_calls; ++i) {
      trial.copy_(flat);
      const auto start = Clock::now();
      run_one(candidates[c], trial);
      seconds += seconds_since(start);
    }
    times[c].push_back(seconds / timed_calls);
  };
  // Without blocks each candidate's first call is untimed: it pays for the scratch buffers'
  // pages later calls reuse (the ring's first 64 MiB call between 2 ranks: 72-105 ms, later
  // ones 28-38).
  if (!in_blocks) {
    for (size_t c = 0; c < n; ++c)
      untimed(c);
  }
  const int timed_turns = take_turns(group, turns, n, time_one);
  // The slowest rank's time decides: an all-reduce is as slow as its slowest rank. Each
  // rank's is its typical time, not its best: the calls that follow run at the typical speed,
  // and on a busy machine one lucky run of a slow candidate would otherwise win.
  const auto slowest_medians = [&] {
    at::Tensor mine = at::empty({static_cast<int64_t>(n)}, at::kDouble);
    for (size_t c = 0; c < n; ++c)
      mine[static_cast<int64_t>(c)] = median(times[c]);
    group.native_all_reduce(mine, ReduceOp::kMax);
    return std::vector<double>(mine.data_ptr<double>(), mine.data_ptr<double>() + n);
  };
  std::vector<double> slowest = slowest_medians();
  // A near tie is run off: the two fastest take kRunoffTurns more turns between themselves
  // alone (AB BA ...), so a pick between them rests on more than the few samples a slow
  // link's budget allowed (one turn at 1 MiB between 4 ranks 25 ms apart). The medians are
  // every rank's, so every rank runs the same runoff.
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return slowest[a] < slowest[b]; });
  const int calls_a_turn = timed_calls + (in_blocks ? 1 : 0);  // with the untimed one
  if (n >= 2 && slowest[order[1]] < slowest[order[0]] * (1 + kRunoffMargin) &&
      kRunoffTurns * calls_a_turn * (slowest[order[0]] + slowest[order[1]]) <= kRunoffBudgetS) {
    for (int turn = 0; turn < kRunoffTurns; ++turn)
      for (size_t i = 0; i < 2; ++i)
        time_one(order[turn % 2 == 0 ? i : 1 - i]);
    slowest = slowest_medians();
  }
  Choice choice = choose(candidates, slowest, group.wire_check());
  choice.calibration_s = std::accumulate(slowest.begin(), slowest.end(), 0.0) *
                         (calls_a_turn * timed_turns + (in_blocks ? 0 : 1));
  return choice;
}

bool AllReduceTuner::recalibrates(Drift& drift, double recent_median_s, const Choice& choice) {
  const auto off_by = [](double a, double b, double band) {
    const double ratio = a / std::max(b, 1e-9);
    return ratio > band || ratio < 1 / band;
  };
  const auto pays = [&](double seconds) { return seconds >= choice.calibration_s; };
  if (drift.reference_s == 0) {
    const double first_drift_s = std::abs(recent_median_s - choice.seconds) * kRecheckCalls;
    if (off_by(recent_median_s, choice.seconds, kFirstCheckBand) && pays(first_drift_s)) {
      drift = Drift{};
      return true;
    }
    drift.reference_s = recent_median_s;
    return false;
  }
  if (!off_by(recent_median_s, drift.reference_s, kDriftBand)) {
    drift.checks = 0;
    drift.seconds = 0;
    return false;
  }
  ++drift.checks;
  drift.seconds += std::abs(recent_median_s - drift.reference_s) * kRecheckCalls;
  if (drift.checks < 2 || !pays(drift.seconds)) return false;
  drift = Drift{};
  return true;
}

AllReduceTuner::Choice AllReduceTuner::choose(const std::vector<Algorithm>& candidates,
                                              const std::vector<double>& seconds, bool wire_check) {
  Choice choice;
  double best_checked = INFINITY;
  for (size_t c = 0; c < candidates.size(); ++c) {
    choice.candidates[candidates[c]] = seconds[c];
    if (candidates[c] != Algorithm::kNative && seconds[c] < best_checked) {
      best_checked = seconds[c];
      choice.algorithm = candidates[c];
    }
  }
  const double native = choice.candidates[Algorithm::kNative];
  const double margin = wire_check ? 1.0 - kNativeMargin : 1.0;
  if (native < best_checked * margin) choice.algorithm = Algorithm::kNative;
  choice.seconds = choice.candidates[choice.algorithm];
  return choice;
}

void AllReduceTuner::all_reduce(Group& group, at::Tensor& flat, const AllReduceOptions& options,
                                const RunOne& run_one) {
  const int64_t bytes = flat.numel() * flat.element_size();
  if (group.size() == 1 || bytes == 0) {
    run_one(Algorithm::kRing, flat);  // nothing crosses: any algorithm finalizes alike
    return;
  }
  const Kind kind = kind_of(options.tag, flat.scalar_type(), options.op, bytes);
  State* state;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    state = &states_[kind];
  }
  // A new calibration replaces the kind's choice under the lock (export_choices reads it
  // from another channel's thread) and goes to the cache.
  auto recalibrate = [&] {
    Choice fresh = calibrate(group, flat, run_one);
    fresh.calibrations = state->choice.calibrations + 1;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      state->choice = std::move(fresh);
    }
    if (save_) save_(export_choices());
  };
  if (state->choice.calibrations == 0 && !state->choice.from_cache) {
    recalibrate();
  } else if (static_cast<int>(state->recent_s.size()) == kRecheckCalls) {
    // Have the links changed? The ranks compare their recent median with the steady one.
    at::Tensor recent = at::full({1}, median(state->recent_s), at::kDouble);
    group.native_all_reduce(recent, ReduceOp::kMax);
    if (recalibrates(state->drift, recent.item<double>(), state->choice)) recalibrate();
    state->recent_s.clear();
  }
  const auto start = Clock::now();
  run_one(state->choice.algorithm, flat);
  state->recent_s.push_back(seconds_since(start));
}

std::string AllReduceTuner::export_choices() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  nlohmann::json kinds = nlohmann::json::array();
  for (const auto& [kind, state] : states_) {
    const Choice& c = state.choice;
    if (c.calibrations == 0 && !c.from_cache) continue;
    nlohmann::json candidates = nlohmann::json::object();
    for (const auto& [algorithm, seconds] : c.candidates)
      candidates[to_string(algorithm)] = seconds;
    kinds.push_back({{"tag", std::get<0>(kind)},
                     {"dtype", std::get<1>(kind)},
                     {"op", std::get<2>(kind)},
                     {"log2_bytes", std::get<3>(kind)},
                     {"algorithm", to_string(c.algorithm)},
                     {"seconds", c.seconds},
                     {"calibration_s", c.calibration_s},
                     {"candidates", candidates}});
  }
  return nlohmann::json{{"dtrain_auto_choices", 1}, {"kinds", kinds}}.dump(1);
}

void AllReduceTuner::import_choices(const std::string& text) {
  std::map<Kind, Choice> loaded;
  try {
    const auto doc = nlohmann::json::parse(text);
    if (doc.value("dtrain_auto_choices", 0) != 1)
      throw std::runtime_error("not a dtrain auto-choice file (version 1)");
    for (const auto& k : doc.at("kinds")) {
      const Kind kind{k.at("tag").get<int>(), k.at("dtype").get<int>(), k.at("op").get<int>(),
                      k.at("log2_bytes").get<int>()};
      if (std::get<3>(kind) < 0 || std::get<3>(kind) > 62)
        throw std::runtime_error("size class out of range");
      Choice c;
      c.algorithm = parse_algorithm(k.at("algorithm").get<std::string>());
      if (c.algorithm == Algorithm::kAuto) throw std::runtime_error("a choice cannot be auto");
      c.seconds = k.at("seconds").get<double>();
      double every_candidate_s = 0;
      for (const auto& [name, seconds] : k.at("candidates").items()) {
        c.candidates[parse_algorithm(name)] = seconds.get<double>();
        every_candidate_s += seconds.get<double>();
      }
      c.calibration_s = k.value("calibration_s", every_candidate_s * kMinCalibrationTurns);
      if (!(c.seconds > 0) || !std::isfinite(c.seconds) || !(c.calibration_s >= 0) ||
          !std::isfinite(c.calibration_s))
        throw std::runtime_error("a time that is not a positive number");
      c.from_cache = true;
      loaded[kind] = std::move(c);
    }
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("auto-choice cache: ") + e.what());
  }
  const std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [kind, c] : loaded)
    states_[kind].choice = std::move(c);
}

void AllReduceTuner::on_calibrated(std::function<void(const std::string&)> save) {
  save_ = std::move(save);
}

const AllReduceTuner::Choice* AllReduceTuner::choice(int tag, at::ScalarType dtype, ReduceOp op,
                                                     int64_t bytes) const {
  const std::lock_guard<std::mutex> lock(mutex_);
  const auto it = states_.find(kind_of(tag, dtype, op, bytes));
  return it == states_.end() ? nullptr : &it->second.choice;
}

}  // namespace dtrain::comm
