// Which backend runs the collectives of tensors on a GPU: `--backend auto|gloo|nccl`.
//
// Gloo always connects the ranks: dtrain's own algorithms (ring, butterfly, direct, the
// codecs' coded all-reduce), tagged point-to-point and the bookkeeping reductions run over it
// on host memory, a CUDA tensor copied through the host. NCCL, where chosen, is a second
// backend beside it for one GPU per rank: the backend's own collectives (the `native`
// algorithm: DDP's exact gradient all-reduce, `bench collective`) then run on CUDA tensors
// where they lie, on NCCL's stream.
//
// auto: nccl for CUDA tensors where every local rank has a GPU of its own; gloo for CPU
// tensors, and where local ranks would share a GPU (NCCL refuses two ranks on one device).
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <string>

namespace dtrain::comm {

enum class CollectiveBackend { kAuto, kGloo, kNccl };

CollectiveBackend parse_collective_backend(const std::string& text);
std::string to_string(CollectiveBackend backend);

struct BackendDecision {
  CollectiveBackend backend = CollectiveBackend::kGloo;  // never kAuto
  std::string why;                                       // for a note on stderr
};

// The backend for tensors on `device` when `local_world_size` ranks share a host with
// `visible_gpus` GPUs. Throws std::invalid_argument, naming the flag and what is missing,
// where nccl is asked for CPU tensors or for more local ranks than GPUs.
BackendDecision resolve_backend(CollectiveBackend asked, const c10::Device& device,
                                int local_world_size, int64_t visible_gpus);

}  // namespace dtrain::comm
