// Where a DDP bucket is reduced. A CPU bucket is reduced where it lies, and so is a CUDA
// bucket the group reduces on its GPU (NCCL, comm/collective_backend.h). Any other CUDA
// bucket is reduced in host memory, since dtrain's collectives and codecs work on CPU
// buffers sent over Gloo: it keeps the gradients (its parameters' .grad views) on the GPU
// and is copied to a pinned host buffer and back on a CUDA stream of its own: the copies
// overlap backward, and the training stream waits for the result only where it uses it.
//
// Contract, once per synchronized step: start_download() on the thread that completed the
// bucket (autograd's, or the training thread for parameters backward did not reach), after
// every gradient of the bucket was written on that thread's current stream; then, on the
// communication thread, wait_download(), the reduction of host() in place, start_upload();
// then finish() on the training thread, after which work it queues sees the reduced bucket.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>

namespace dtrain::parallel {

class BucketStaging {
 public:
  // Staging for `flat`: a contiguous float32 bucket on the CPU or on a CUDA device, which
  // is reduced where it lies when `reduced_on_device` (NCCL's all-reduce, or a codec on the
  // GPU; then wait_download() returns `flat` itself). Throws std::invalid_argument for a CUDA
  // bucket staged through the host where dtrain was built without CUDA.
  static std::unique_ptr<BucketStaging> make(const at::Tensor& flat, bool reduced_on_device);
  virtual ~BucketStaging() = default;

  virtual void start_download() = 0;
  // The buffer reduced: in host memory, or the bucket itself where it is reduced in place.
  virtual at::Tensor& wait_download() = 0;
  virtual void start_upload() = 0;
  virtual void finish() = 0;
};

// The CUDA staging (bucket_staging_cuda.cpp), for make().
std::unique_ptr<BucketStaging> make_cuda_staging(const at::Tensor& flat);

}  // namespace dtrain::parallel
