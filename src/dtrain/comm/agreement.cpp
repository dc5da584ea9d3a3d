#include "dtrain/comm/agreement.h"

#include <ATen/ATen.h>

#include <functional>

#include "dtrain/comm/group.h"

namespace dtrain::comm {

ValueRange range_over_ranks(Group& group, int64_t value) {
  // max(v) = -min(-v): one minimum over [v, -v] gives both ends.
  auto t = at::tensor({value, -value}, at::kLong);
  group.native_all_reduce(t, ReduceOp::kMin);
  return {t[0].item<int64_t>(), -t[1].item<int64_t>()};
}

bool same_on_all_ranks(Group& group, const std::string& settings) {
  const uint64_t hash = std::hash<std::string>{}(settings) & ((uint64_t{1} << 62) - 1);
  return range_over_ranks(group, static_cast<int64_t>(hash)).agree();
}

}  // namespace dtrain::comm
