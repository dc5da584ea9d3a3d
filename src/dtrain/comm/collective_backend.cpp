#include "dtrain/comm/collective_backend.h"

#include <stdexcept>

#include "dtrain/base/names.h"

namespace dtrain::comm {
namespace {
const EnumNames<CollectiveBackend> kBackendNames("backend", {{CollectiveBackend::kAuto, "auto"},
                                                             {CollectiveBackend::kGloo, "gloo"},
                                                             {CollectiveBackend::kNccl, "nccl"}});
}  // namespace

CollectiveBackend parse_collective_backend(const std::string& text) {
  return kBackendNames.parse(text);
}

std::string to_string(CollectiveBackend backend) {
  return kBackendNames.to_string(backend);
}

BackendDecision resolve_backend(CollectiveBackend asked, const c10::Device& device,
                                int local_world_size, int64_t visible_gpus) {
  if (asked == CollectiveBackend::kGloo) return {CollectiveBackend::kGloo, "asked for"};
  if (!device.is_cuda()) {
    if (asked == CollectiveBackend::kNccl)
      throw std::invalid_argument("--backend nccl reduces CUDA tensors: it needs --device cuda");
    return {CollectiveBackend::kGloo, "CPU tensors"};
  }
  const std::string sharing = std::to_string(local_world_size) + " local ranks, " +
                              std::to_string(visible_gpus) + " GPU(s) visible";
  if (local_world_size > visible_gpus) {
    if (asked == CollectiveBackend::kNccl)
      throw std::invalid_argument("--backend nccl needs a GPU per local rank (" + sharing +
                                  "; NCCL refuses two ranks on one GPU): use --backend gloo, "
                                  "which reduces through host memory");
    return {CollectiveBackend::kGloo, "local ranks share a GPU (" + sharing +
                                          "), which NCCL refuses: gloo through host memory"};
  }
  return {CollectiveBackend::kNccl, asked == CollectiveBackend::kNccl
                                        ? std::string("asked for")
                                        : "CUDA tensors, a GPU per local rank (" + sharing + ")"};
}

}  // namespace dtrain::comm
