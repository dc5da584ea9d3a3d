// Precompiled header: the LibTorch headers almost every translation unit needs.
// Not included directly by any source; CMake injects it.
#pragma once
#include <ATen/ATen.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>
