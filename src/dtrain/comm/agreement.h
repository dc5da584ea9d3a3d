// "Do all ranks agree?": the one check every component uses before it relies on the ranks
// holding the same configuration or model, so a mismatch fails on every rank at once
// instead of hanging one of them in a collective.
#pragma once

#include <cstdint>
#include <string>

namespace dtrain::comm {

class Group;

struct ValueRange {
  int64_t lo = 0, hi = 0;
  bool agree() const { return lo == hi; }
};

// The minimum and maximum of `value` over the group, on every rank (one all-reduce).
ValueRange range_over_ranks(Group& group, int64_t value);

// Whether every rank passed the same `settings` text (compared by a 62-bit hash; one
// all-reduce), on every rank.
bool same_on_all_ranks(Group& group, const std::string& settings);

}  // namespace dtrain::comm
