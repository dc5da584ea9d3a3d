#include "dtrain/metrics/cuda_memory.h"

#if __has_include(<c10/cuda/CUDACachingAllocator.h>)
#include <c10/cuda/CUDACachingAllocator.h>
#define DTRAIN_HAVE_CUDA_ALLOCATOR 1
#endif

namespace dtrain::metrics {

CudaMemory cuda_memory(const c10::Device& device) {
  CudaMemory m;
#ifdef DTRAIN_HAVE_CUDA_ALLOCATOR
  if (!device.is_cuda()) return m;
  namespace alloc = c10::cuda::CUDACachingAllocator;
  const auto stats = alloc::getDeviceStats(device.index());
  const auto aggregate = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  m.max_allocated_bytes = stats.allocated_bytes[aggregate].peak;
  m.max_reserved_bytes = stats.reserved_bytes[aggregate].peak;
#else
  (void)device;
#endif
  return m;
}

}  // namespace dtrain::metrics
