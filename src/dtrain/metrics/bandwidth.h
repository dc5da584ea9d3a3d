// The measurement formulas of docs/measurement.md, defined once and
// used by the benchmarks, DDP and the scaling study (nccl-tests conventions).
#pragma once

#include <cstdint>

namespace dtrain::metrics {

enum class CollectiveKind { kAllReduce, kReduceScatter, kAllGather, kBroadcast };

// busbw / algbw for a collective over p ranks: 2(p-1)/p for all_reduce, (p-1)/p for
// reduce_scatter and all_gather (bytes = the whole array), 1 for broadcast.
double bus_factor(CollectiveKind kind, int p);

// algbw in GB/s (1e9 bytes per second) of `bytes` moved in `seconds`; 0 when no time.
double algbw_gbps(double bytes, double seconds);

// Bytes each rank sends in a bandwidth-optimal (ring) all-reduce of `bytes`:
// 2 * bytes * (p-1)/p, rounded down; 0 for one rank.
int64_t ring_allreduce_traffic(int64_t bytes, int p);

}  // namespace dtrain::metrics
