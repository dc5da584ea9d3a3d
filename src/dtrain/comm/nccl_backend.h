// Internal (comm/world.cpp): NCCL's process group, the second backend that runs the
// collectives of CUDA tensors beside Gloo (comm/collective_backend.h). One GPU per rank.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>

namespace dtrain::comm {

// Makes this rank's GPU `device_index` current, creates the NCCL communicator for it at once
// (every rank calls this together) and checks it with a one-element all-reduce, so a
// misconfigured job fails here, naming NCCL's error, not at its first gradient. Throws
// std::invalid_argument where dtrain was built without NCCL (connect() reports both as a
// CommError).
c10::intrusive_ptr<c10d::Backend> make_nccl(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                            int size, std::chrono::milliseconds timeout,
                                            int device_index);

}  // namespace dtrain::comm
