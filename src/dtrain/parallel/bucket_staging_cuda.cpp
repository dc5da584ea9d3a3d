// The CUDA side of bucket_staging.h. Compiled with DTRAIN_WITH_CUDA where LibTorch has
// CUDA (CMakeLists.txt); without it, asking for a CUDA bucket is an error.
#include <stdexcept>

#include "dtrain/parallel/bucket_staging.h"

#ifdef DTRAIN_WITH_CUDA
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace dtrain::parallel {

#ifdef DTRAIN_WITH_CUDA
namespace {

class PinnedHostCopy final : public BucketStaging {
 public:
  explicit PinnedHostCopy(at::Tensor flat)
      : flat_(std::move(flat)),
        host_(
            at::empty(flat_.sizes(), at::TensorOptions().dtype(flat_.dtype()).pinned_memory(true))),
        copies_(c10::cuda::getStreamFromPool(false, flat_.device().index())) {}

  void start_download() override {
    const c10::cuda::CUDAGuard on(flat_.device());
    gradients_ready_.record(c10::cuda::getCurrentCUDAStream(flat_.device().index()));
    gradients_ready_.block(copies_);
    const c10::cuda::CUDAStreamGuard copying(copies_);
    host_.copy_(flat_, /*non_blocking=*/true);
    downloaded_.record(copies_);
  }

  at::Tensor& wait_download() override {
    downloaded_.synchronize();
    return host_;
  }

  void start_upload() override {
    const c10::cuda::CUDAGuard on(flat_.device());
    const c10::cuda::CUDAStreamGuard copying(copies_);
    flat_.copy_(host_, /*non_blocking=*/true);
    uploaded_.record(copies_);
  }

  void finish() override {
    const c10::cuda::CUDAGuard on(flat_.device());
    uploaded_.block(c10::cuda::getCurrentCUDAStream(flat_.device().index()));
  }

 private:
  at::Tensor flat_, host_;
  c10::cuda::CUDAStream copies_;
  at::cuda::CUDAEvent gradients_ready_, downloaded_, uploaded_;
};

}  // namespace

std::unique_ptr<BucketStaging> make_cuda_staging(const at::Tensor& flat) {
  return std::make_unique<PinnedHostCopy>(flat);
}
#else
std::unique_ptr<BucketStaging> make_cuda_staging(const at::Tensor&) {
  throw std::invalid_argument("DDP: a CUDA model needs dtrain built against LibTorch with CUDA");
}
#endif

}  // namespace dtrain::parallel
