// The NCCL side of nccl_backend.h. Compiled with DTRAIN_WITH_NCCL where LibTorch has CUDA
// and nccl.h is found (CMakeLists.txt); without it, asking for NCCL is an error.
#include "dtrain/comm/nccl_backend.h"

#include <stdexcept>

#ifdef DTRAIN_WITH_NCCL
#include <ATen/ATen.h>
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace dtrain::comm {

#ifdef DTRAIN_WITH_NCCL
c10::intrusive_ptr<c10d::Backend> make_nccl(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                            int size, std::chrono::milliseconds timeout,
                                            int device_index) {
  const at::Device device(at::kCUDA, static_cast<c10::DeviceIndex>(device_index));
  c10::cuda::set_device(device.index());
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  auto pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
  // Bound to the rank's GPU, the communicator is made now rather than at the first
  // collective, and later collectives on that GPU reuse it.
  pg->setBoundDeviceId(device);
  pg->eagerConnectSingleDevice(device);
  std::vector<at::Tensor> probe{at::ones({1}, at::TensorOptions().device(device))};
  pg->allreduce(probe)->wait(timeout);
  const float sum = probe[0].item<float>();  // waits for the device
  if (sum != static_cast<float>(size))
    throw std::runtime_error("NCCL's first all-reduce summed " + std::to_string(sum) + " over " +
                             std::to_string(size) + " ranks");
  return pg;
}
#else
c10::intrusive_ptr<c10d::Backend> make_nccl(const c10::intrusive_ptr<c10d::Store>&, int, int,
                                            std::chrono::milliseconds, int) {
  throw std::invalid_argument(
      "--backend nccl: this dtrain was built without NCCL (LibTorch without CUDA, or no "
      "nccl.h found when it was configured; see `dtrain --version`)");
}
#endif

}  // namespace dtrain::comm
