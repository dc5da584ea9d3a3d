// CUDA memory per process, as PyTorch reports it (torch.cuda.max_memory_allocated): the caching
// allocator's peak allocated and reserved bytes on one GPU. Zero where LibTorch has no
// CUDA or the device is the CPU.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>

namespace dtrain::metrics {

struct CudaMemory {
  int64_t max_allocated_bytes = 0;
  int64_t max_reserved_bytes = 0;
};

CudaMemory cuda_memory(const c10::Device& device);

}  // namespace dtrain::metrics
