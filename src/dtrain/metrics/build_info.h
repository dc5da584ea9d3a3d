// What this binary was built with and what it can reach: dtrain's version, the LibTorch it
// runs on and that LibTorch's build settings (read from LibTorch itself, so a different
// libtorch.so found at run time is reported as it is), and the CUDA devices visible now.
// Printed by `dtrain --version`; benchmark rows carry `torch` so every comparison names it.
#pragma once

#include <string>

namespace dtrain::metrics {

struct BuildInfo {
  std::string dtrain_version;
  std::string torch_version;  // LibTorch's own TORCH_VERSION build setting, e.g. "2.11.0"
  bool torch_cuda = false;    // LibTorch was built with CUDA (USE_CUDA)
  std::string cuda_version;   // CUDA LibTorch was built for ("" without CUDA)
  std::string cudnn_version;  // "" without cuDNN
  bool torch_nccl = false;    // c10d has ProcessGroupNCCL (USE_NCCL)
  bool torch_gloo = false;    // c10d has ProcessGroupGloo (USE_GLOO)
  bool dtrain_cuda = false;   // dtrain's own CUDA code paths are compiled in
  bool dtrain_nccl = false;   // --backend nccl is compiled in (nccl.h was found)
  int cuda_devices = 0;       // visible now; 0 without a driver or device
};

BuildInfo build_info();

// Multi-line human-readable form of `info` (what `dtrain --version` prints).
std::string describe(const BuildInfo& info);

// Parses LibTorch's at::show_config() text: the value of KEY in its "Build settings: K=V, ..."
// list, or "" when absent. Exposed for the unit test.
std::string torch_build_setting(const std::string& config, const std::string& key);

}  // namespace dtrain::metrics
