// dtrain --version reads LibTorch's own build settings; checked against LibTorch's header
// macros (an independent source) and a fixed settings text.
#include <gtest/gtest.h>
#include <torch/version.h>

#include "dtrain/metrics/build_info.h"

namespace dtrain::metrics {
namespace {

TEST(BuildInfoTest, ParsesBuildSettingsByKey) {
  const std::string config =
      "PyTorch built with:\n  - GCC 13.3\n  - Build settings: BLAS_INFO=mkl, CUDA_VERSION=13.0, "
      "CXX_FLAGS= -O2 -fPIC -DX=1, TORCH_VERSION=2.11.0, USE_CUDA=ON, USE_NCCL=1, \n";
  EXPECT_EQ(torch_build_setting(config, "CUDA_VERSION"), "13.0");
  EXPECT_EQ(torch_build_setting(config, "TORCH_VERSION"), "2.11.0");
  EXPECT_EQ(torch_build_setting(config, "USE_NCCL"), "1");
  EXPECT_EQ(torch_build_setting(config, "USE"), "");      // a prefix is not a key
  EXPECT_EQ(torch_build_setting(config, "USE_XPU"), "");  // absent
  EXPECT_EQ(torch_build_setting("no settings here", "USE_CUDA"), "");
}

TEST(BuildInfoTest, ReportsTheLibTorchThisBinaryRunsOn) {
  const BuildInfo info = build_info();
  EXPECT_EQ(info.torch_version, TORCH_VERSION);
  EXPECT_TRUE(info.torch_gloo);  // dtrain's CPU transport
  if (!info.torch_cuda) {
    EXPECT_EQ(info.cuda_devices, 0);
    EXPECT_TRUE(info.cuda_version.empty());
  }
  const std::string text = describe(info);
  EXPECT_NE(text.find("dtrain " + info.dtrain_version), std::string::npos) << text;
  EXPECT_NE(text.find(std::string("LibTorch ") + TORCH_VERSION), std::string::npos) << text;
}

}  // namespace
}  // namespace dtrain::metrics
