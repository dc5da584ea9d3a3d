// all_reduce: every rank ends with the elementwise reduction of all ranks' tensors.
//
// Algorithms (one per file):
//   ring       reduce-scatter + all-gather around the ring, segmented and pipelined
//              (bandwidth-optimal: 2(p-1)/p of the data leaves each rank)
//   butterfly  Rabenseifner: recursive-halving reduce-scatter + recursive-doubling
//              all-gather; non-powers of two fold the extra ranks in first; small
//              messages use recursive doubling on the whole vector (log2 p latency)
//   direct     each rank reduces its own slice from all others, then sends it to all
//   exchange   direct with every receive posted at the start (armed_all_reduce.h); with
//              2 ranks one exchange of the whole vector: a message's round trip paid once,
//              for long links (uses the tag and tag + 1)
//   native     the backend's own all_reduce (Gloo; NCCL on a GPU, comm/collective_backend.h)
//   auto       the fastest of them on this group for this kind of call, by measurement
//              (allreduce_tuner.h)
//
// Any element count (0, 1, fewer than ranks, not divisible), in place, contiguous CPU
// tensors of float32/64, float16, bfloat16, int32, int64. A CUDA tensor takes native (or
// auto, which then means native): NCCL where the group has it for that GPU, else Gloo
// through host memory; the other algorithms throw invalid_argument for it. Every rank must pass the
// same count, dtype, op and algorithm. All ranks end with bitwise identical results.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "dtrain/comm/reduce_op.h"
#include "dtrain/comm/tags.h"

namespace dtrain::comm {

class Group;

enum class Algorithm { kRing, kButterfly, kDirect, kExchange, kNative, kAuto };

Algorithm parse_algorithm(const std::string& name);
std::string to_string(Algorithm algo);
const std::vector<Algorithm>& concrete_algorithms();
// "ring, butterfly, ..., auto": every name (or every concrete one), for help texts and lists.
std::string algorithm_names(const std::string& separator = ", ", bool with_auto = true);

// Whether `algo` takes a tensor off the CPU: native, and auto (which then means native).
bool runs_off_cpu(Algorithm algo);

struct AllReduceOptions {
  ReduceOp op = ReduceOp::kSum;
  Algorithm algorithm = Algorithm::kAuto;
  int tag = collective_tag(CollectiveChannel::kAllReduce);  // see comm/tags.h
  // Ring: bytes per pipelined segment.
  int64_t segment_bytes = 1024 * 1024;
};

void all_reduce(Group& group, at::Tensor& tensor, const AllReduceOptions& options = {});

}  // namespace dtrain::comm
