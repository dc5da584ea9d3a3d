// Where tensors live: `--device cpu|cuda|cuda:N`, parsed and checked once. CPU is the
// default everywhere; CUDA is a parameter of the same code paths, never a copy of them.
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <string>

namespace dtrain {

// "cpu", "cuda" (GPU LOCAL_RANK modulo the visible GPUs, else 0) or "cuda:N". Throws
// std::invalid_argument naming what is missing when CUDA is asked for and none is usable
// (LibTorch without CUDA, no visible device, N out of range).
c10::Device parse_device(const std::string& text);
std::string to_string(const c10::Device& device);

// Waits for the device's queued work, so a host clock read after it measures the work
// (no-op on the CPU).
void synchronize(const c10::Device& device);

// For messages: "1 CUDA device(s) visible", or why none is usable.
std::string cuda_summary();

}  // namespace dtrain
