#include "dtrain/comm/allreduce_tuner.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "dtrain/comm/group.h"

namespace dtrain::comm {
namespace {

using Clock = std::chrono::steady_clock;

// The typical time, not the best: the calls that follow run at the typical speed, and on a
// busy machine one lucky run of a slow candidate would otherwise win.
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

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

AllReduceTuner::Choice AllReduceTuner::calibrate(Group& group, const at::Tensor& flat,
                                                 const RunOne& run_one) const {
  const auto& candidates = concrete_algorithms();
  const size_t n = candidates.size();
  // Turns alternate the order (ABCD DCBA ...): a drift hits every candidate alike. Small
  // calls are noisy and cheap, so they take more turns (the same number on every rank): at
  // 64 KiB on 2 shared cores the same algorithm's mean varies by 2x from run to run, and
  // 6 turns picked candidates 15-25 % slower than the best (docs/results.md, 2026-11-26).
  const int64_t bytes = flat.numel() * flat.element_size();
  const int turns = bytes <= (int64_t{1} << 20) ? 16 : bytes <= (int64_t{16} << 20) ? 4 : 2;
  std::vector<std::vector<double>> times(n);
  at::Tensor trial = at::empty_like(flat);
  const auto began = Clock::now();
  for (int turn = 0; turn < turns; ++turn) {
    for (size_t i = 0; i < n; ++i) {
      const size_t c = turn % 2 == 0 ? i : n - 1 - i;
      trial.copy_(flat);
      const auto start = Clock::now();
      run_one(candidates[c], trial);
      times[c].push_back(seconds_since(start));
    }
    // Calls this slow are steady (a long link's round trips, a large message): the ranks
    // stop together once the turns so far took kCalibrationBudgetS (the slowest rank's).
    if (turn + 1 < turns) {
      at::Tensor spent = at::full({1}, seconds_since(began), at::kDouble);
      group.native_all_reduce(spent, ReduceOp::kMax);
      if (spent.item<double>() >= kCalibrationBudgetS) break;
    }
  }
  // The slowest rank's time decides: an all-reduce is as slow as its slowest rank.
  at::Tensor mine = at::empty({static_cast<int64_t>(n)}, at::kDouble);
  for (size_t c = 0; c < n; ++c)
    mine[static_cast<int64_t>(c)] = median(times[c]);
  group.native_all_reduce(mine, ReduceOp::kMax);
  Choice choice;
  const auto* slowest = mine.data_ptr<double>();
  double best_checked = INFINITY;
  for (size_t c = 0; c < n; ++c) {
    choice.candidates[candidates[c]] = slowest[c];
    if (candidates[c] != Algorithm::kNative && slowest[c] < best_checked) {
      best_checked = slowest[c];
      choice.algorithm = candidates[c];
    }
  }
  const double native = choice.candidates[Algorithm::kNative];
  const double margin = group.wire_check() ? 1.0 - kNativeMargin : 1.0;
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
  if (state->choice.calibrations == 0) {
    const int before = state->choice.calibrations;
    state->choice = calibrate(group, flat, run_one);
    state->choice.calibrations = before + 1;
  } else if (static_cast<int>(state->recent_s.size()) == kRecheckCalls) {
    // Have the links changed? The ranks compare their recent median with the calibration's.
    at::Tensor recent = at::full({1}, median(state->recent_s), at::kDouble);
    group.native_all_reduce(recent, ReduceOp::kMax);
    const double ratio = recent.item<double>() / std::max(state->choice.seconds, 1e-9);
    const bool drifted = ratio > 1.5 || ratio < 1 / 1.5;
    state->drifted_checks = drifted ? state->drifted_checks + 1 : 0;
    if (state->drifted_checks == 2) {
      const int before = state->choice.calibrations;
      state->choice = calibrate(group, flat, run_one);
      state->choice.calibrations = before + 1;
      state->drifted_checks = 0;
    }
    state->recent_s.clear();
  }
  const auto start = Clock::now();
  run_one(state->choice.algorithm, flat);
  state->recent_s.push_back(seconds_since(start));
}

const AllReduceTuner::Choice* AllReduceTuner::choice(int tag, at::ScalarType dtype, ReduceOp op,
                                                     int64_t bytes) const {
  const std::lock_guard<std::mutex> lock(mutex_);
  const auto it = states_.find(kind_of(tag, dtype, op, bytes));
  return it == states_.end() ? nullptr : &it->second.choice;
}

}  // namespace dtrain::comm
