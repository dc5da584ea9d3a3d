#include "dtrain/metrics/bandwidth.h"

#include <stdexcept>
#include <string>

namespace dtrain::metrics {

namespace {

double spread(int p) {
  if (p < 1) throw std::invalid_argument("world size " + std::to_string(p) + " is not positive");
  return static_cast<double>(p - 1) / p;
}

}  // namespace

double bus_factor(CollectiveKind kind, int p) {
  switch (kind) {
    case CollectiveKind::kAllReduce:
      return 2.0 * spread(p);
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllGather:
      return spread(p);
    case CollectiveKind::kBroadcast:
      return 1.0;
  }
  return 1.0;
}

double algbw_gbps(double bytes, double seconds) {
  return seconds > 0 ? bytes / seconds / 1e9 : 0.0;
}

int64_t ring_allreduce_traffic(int64_t bytes, int p) {
  spread(p);  // validates p
  return 2 * bytes * (p - 1) / p;
}

}  // namespace dtrain::metrics
