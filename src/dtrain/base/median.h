// The median of a sample: the middle value, or the mean of the two middle ones where the
// sample's size is even. Timings use it where one slow call in many must not move the
// figure (the all-reduce tuner's calibration, every bench's median).
#pragma once

#include <algorithm>
#include <vector>

namespace dtrain {

// 0 for an empty sample.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace dtrain
