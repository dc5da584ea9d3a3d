#include "dtrain/comm/allreduce.h"

#include <ATen/ATen.h>

#include <stdexcept>

#include "dtrain/base/names.h"
#include "dtrain/comm/algorithms.h"
#include "dtrain/comm/allreduce_tuner.h"
#include "dtrain/comm/armed_all_reduce.h"
#include "dtrain/comm/group.h"

namespace dtrain::comm {

namespace {
const EnumNames<Algorithm> kAlgorithmNames("algorithm", {{Algorithm::kRing, "ring"},
                                                         {Algorithm::kButterfly, "butterfly"},
                                                         {Algorithm::kDirect, "direct"},
                                                         {Algorithm::kExchange, "exchange"},
                                                         {Algorithm::kNative, "native"},
                                                         {Algorithm::kAuto, "auto"}});
}

Algorithm parse_algorithm(const std::string& name) {
  return kAlgorithmNames.parse(name);
}

std::string to_string(Algorithm algo) {
  return kAlgorithmNames.to_string(algo);
}

const std::vector<Algorithm>& concrete_algorithms() {
  static const std::vector<Algorithm> all{Algorithm::kRing, Algorithm::kButterfly,
                                          Algorithm::kDirect, Algorithm::kExchange,
                                          Algorithm::kNative};
  return all;
}

std::string algorithm_names(const std::string& separator, bool with_auto) {
  std::string out;
  for (const Algorithm a : concrete_algorithms())
    out += (out.empty() ? "" : separator) + to_string(a);
  return with_auto ? out + separator + to_string(Algorithm::kAuto) : out;
}

bool runs_off_cpu(Algorithm algo) {
  return algo == Algorithm::kAuto || algo == Algorithm::kNative;
}

void all_reduce(Group& group, at::Tensor& tensor, const AllReduceOptions& options) {
  if (!tensor.is_contiguous()) {
    throw std::invalid_argument(group.describe() + ": all_reduce needs a contiguous tensor");
  }
  check_reduce_op(options.op, tensor.scalar_type());
  at::Tensor flat = tensor.view({-1});
  Algorithm algo = options.algorithm;
  if (!tensor.device().is_cpu()) {
    // dtrain's algorithms move host memory; the backend's own runs anywhere (NCCL where the
    // tensor lies, else Gloo through a host copy).
    if (!runs_off_cpu(algo))
      throw std::invalid_argument(group.describe() + ": all_reduce of a tensor on " +
                                  tensor.device().str() + " runs native (or auto), not " +
                                  to_string(algo) + ", which works on CPU tensors");
    algo = Algorithm::kNative;
  }
  const auto run_one = [&](Algorithm concrete, at::Tensor& buffer) {
    switch (concrete) {
      case Algorithm::kRing:
        detail::ring_all_reduce(group, buffer, options.op, options.tag, options.segment_bytes);
        return;
      case Algorithm::kButterfly:
        detail::butterfly_all_reduce(group, buffer, options.op, options.tag);
        return;
      case Algorithm::kDirect:
        detail::direct_all_reduce(group, buffer, options.op, options.tag);
        return;
      case Algorithm::kExchange: {
        ArmedAllReduce exchange(group, buffer.numel(), options.tag, options.tag + 1,
                                buffer.scalar_type());
        exchange.run(buffer, options.op);
        return;
      }
      case Algorithm::kNative:
        group.native_all_reduce(buffer, options.op);
        return;
      case Algorithm::kAuto:
        break;
    }
    throw std::logic_error("unreachable algorithm");
  };
  if (algo == Algorithm::kAuto)
    group.all_reduce_tuner().all_reduce(group, flat, options, run_one);
  else
    run_one(algo, flat);
}

}  // namespace dtrain::comm
