// Bytes held by LibTorch CPU tensors: an allocator installed in front of the default one
// counts every allocation and free, so benchmarks can report the peak a piece of code
// allocates (CUDA's max_memory_allocated, for CPU tensors).
#pragma once

#include <cstdint>

namespace dtrain::metrics {

// Installs the counting allocator (idempotent; tensors allocated before are not counted).
void track_allocations();
int64_t allocated_bytes();
int64_t peak_allocated_bytes();
// Starts a new peak from the current level.
void reset_peak_allocated();

}  // namespace dtrain::metrics
