#include "dtrain/base/device.h"

#include <torch/cuda.h>

#include <cstdlib>
#include <stdexcept>

#include "dtrain/base/parse.h"

namespace dtrain {

std::string cuda_summary() {
  if (!torch::cuda::is_available()) {
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    return std::string("no CUDA device is visible") +
           (visible != nullptr ? std::string(" (CUDA_VISIBLE_DEVICES='") + visible + "')" : "") +
           " or this LibTorch was built without CUDA (see `dtrain --version`)";
  }
  return std::to_string(torch::cuda::device_count()) + " CUDA device(s) visible";
}

c10::Device parse_device(const std::string& text) {
  if (text == "cpu") return c10::Device(c10::kCPU);
  if (text != "cuda" && text.rfind("cuda:", 0) != 0)
    throw std::invalid_argument("unknown device '" + text + "' (cpu, cuda or cuda:N)");
  if (!torch::cuda::is_available())
    throw std::invalid_argument("device '" + text + "': " + cuda_summary());
  const int64_t count = torch::cuda::device_count();
  int64_t index = 0;
  if (text == "cuda") {
    const char* local_rank = std::getenv("LOCAL_RANK");
    if (local_rank != nullptr) {
      // A malformed LOCAL_RANK must not quietly put every rank on GPU 0.
      const auto parsed = parse_integer(local_rank, 0, 1 << 20);
      if (!parsed)
        throw std::invalid_argument("device 'cuda': LOCAL_RANK='" + std::string(local_rank) +
                                    "' is not a local rank (0 or more); give --device cuda:N");
      index = *parsed % count;
    }
  } else {
    const auto parsed = parse_integer(text.substr(5), 0, count - 1);
    if (!parsed)
      throw std::invalid_argument("device '" + text + "': GPU index must be 0.." +
                                  std::to_string(count - 1) + " (" + cuda_summary() + ")");
    index = *parsed;
  }
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
}

std::string to_string(const c10::Device& device) {
  return device.str();
}

void synchronize(const c10::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

}  // namespace dtrain
