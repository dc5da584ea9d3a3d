// Precompiled header: the LibTorch headers most translation units need. Not included
// directly by any source; CMake injects it.
#pragma once
#include <ATen/ATen.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>
