#include "dtrain/comm/allreduce.h"

#include <ATen/ATen.h>

#include <stdexcept>

#include "dtrain/comm/algorithms.h"
#include "dtrain/comm/group.h"

namespace dtrain::comm {

Algorithm parse_algorithm(const std::string& name) {
  if (name == "ring") return Algorithm::kRing;
  if (name == "butterfly") return Algorithm::kButterfly;
  if (name == "direct") return Algorithm::kDirect;
  if (name == "native") return Algorithm::kNative;
  if (name == "auto") return Algorithm::kAuto;
  throw std::invalid_argument("unknown algorithm '" + name +
                              "' (expected ring, butterfly, direct, native or auto)");
}

std::string to_string(Algorithm algo) {
  switch (algo) {
    case Algorithm::kRing:
      return "ring";
    case Algorithm::kButterfly:
      return "butterfly";
    case Algorithm::kDirect:
      return "direct";
    case Algorithm::kNative:
      return "native";
    case Algorithm::kAuto:
      return "auto";
  }
  return "?";
}

const std::vector<Algorithm>& concrete_algorithms() {
  static const std::vector<Algorithm> all{Algorithm::kRing, Algorithm::kButterfly,
                                          Algorithm::kDirect, Algorithm::kNative};
  return all;
}

Algorithm choose_algorithm(int64_t bytes, int world_size) {
  // Crossovers measured with `dtrain bench collective` on loopback (docs/results.md):
  // latency-bound messages favour butterfly's log2(p) rounds, large ones the ring.
  if (world_size <= 2) return bytes <= (256 << 10) ? Algorithm::kButterfly : Algorithm::kRing;
  return bytes <= (1 << 20) ? Algorithm::kButterfly : Algorithm::kRing;
}

void all_reduce(Group& group, at::Tensor& tensor, const AllReduceOptions& options) {
  if (!tensor.device().is_cpu()) {
    throw std::invalid_argument(group.describe() + ": all_reduce supports CPU tensors only");
  }
  if (!tensor.is_contiguous()) {
    throw std::invalid_argument(group.describe() + ": all_reduce needs a contiguous tensor");
  }
  at::Tensor flat = tensor.view({-1});
  const int64_t bytes = flat.numel() * flat.element_size();
  Algorithm algo = options.algorithm;
  if (algo == Algorithm::kAuto) algo = choose_algorithm(bytes, group.size());
  switch (algo) {
    case Algorithm::kRing:
      detail::ring_all_reduce(group, flat, options.op, options.tag, options.segment_bytes);
      return;
    case Algorithm::kButterfly:
      detail::butterfly_all_reduce(group, flat, options.op, options.tag);
      return;
    case Algorithm::kDirect:
      detail::direct_all_reduce(group, flat, options.op, options.tag);
      return;
    case Algorithm::kNative:
      group.native_all_reduce(flat, options.op);
      return;
    case Algorithm::kAuto:
      break;
  }
  throw std::logic_error("unreachable algorithm");
}

}  // namespace dtrain::comm
