// Wall-clock intervals for the time splits every mode reports.
#pragma once

#include <chrono>

namespace dtrain::metrics {

using Clock = std::chrono::steady_clock;

// Seconds from t0 to now.
inline double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Seconds spent running f().
template <typename F>
double seconds(F&& f) {
  const auto t0 = Clock::now();
  f();
  return since(t0);
}

}  // namespace dtrain::metrics
