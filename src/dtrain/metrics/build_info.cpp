#include "dtrain/metrics/build_info.h"

#include <ATen/Version.h>
#include <ATen/detail/CUDAHooksInterface.h>

#include <sstream>

namespace dtrain::metrics {

std::string torch_build_setting(const std::string& config, const std::string& key) {
  const std::string marker = "Build settings:";
  const size_t start = config.find(marker);
  if (start == std::string::npos) return "";
  std::istringstream settings(config.substr(start + marker.size()));
  std::string item;
  while (std::getline(settings, item, ',')) {
    const size_t first = item.find_first_not_of(" \n\t");
    if (first == std::string::npos) continue;
    item = item.substr(first);
    const size_t eq = item.find('=');
    if (eq != std::string::npos && item.compare(0, eq, key) == 0) {
      std::string value = item.substr(eq + 1);
      value.erase(value.find_last_not_of(" \n\t") + 1);
      return value;
    }
  }
  return "";
}

namespace {

bool enabled(const std::string& value) {
  return value == "ON" || value == "1" || value == "TRUE";
}

}  // namespace

BuildInfo build_info() {
  const std::string config = at::show_config();
  BuildInfo info;
  info.dtrain_version = DTRAIN_VERSION;
  info.torch_version = torch_build_setting(config, "TORCH_VERSION");
  info.torch_cuda = enabled(torch_build_setting(config, "USE_CUDA"));
  info.cuda_version = info.torch_cuda ? torch_build_setting(config, "CUDA_VERSION") : "";
  info.cudnn_version = enabled(torch_build_setting(config, "USE_CUDNN"))
                           ? torch_build_setting(config, "CUDNN_VERSION")
                           : "";
  info.torch_nccl = enabled(torch_build_setting(config, "USE_NCCL"));
  info.torch_gloo = enabled(torch_build_setting(config, "USE_GLOO"));
#ifdef DTRAIN_WITH_CUDA
  info.dtrain_cuda = true;
#endif
#ifdef DTRAIN_WITH_NCCL
  info.dtrain_nccl = true;
#endif
  // Without a driver the CUDA hooks report no device instead of throwing.
  info.cuda_devices = info.torch_cuda ? at::detail::getCUDAHooks().deviceCount() : 0;
  return info;
}

std::string describe(const BuildInfo& info) {
  const auto yes_no = [](bool b) { return b ? "yes" : "no"; };
  std::ostringstream out;
  out << "dtrain " << info.dtrain_version << "\n";
  out << "LibTorch " << info.torch_version << "\n";
  out << "  CUDA in LibTorch:  " << yes_no(info.torch_cuda);
  if (info.torch_cuda) {
    out << " (CUDA " << info.cuda_version;
    if (!info.cudnn_version.empty()) out << ", cuDNN " << info.cudnn_version;
    out << ")";
  }
  out << "\n  NCCL in LibTorch:  " << yes_no(info.torch_nccl) << "\n";
  out << "  Gloo in LibTorch:  " << yes_no(info.torch_gloo) << "\n";
  out << "dtrain CUDA code:    " << (info.dtrain_cuda ? "compiled in" : "not compiled (CPU only)")
      << "\n";
  out << "dtrain NCCL backend: " << (info.dtrain_nccl ? "compiled in" : "not compiled") << "\n";
  out << "CUDA devices now:    " << info.cuda_devices << "\n";
  return out.str();
}

}  // namespace dtrain::metrics
