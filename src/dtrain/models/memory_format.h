// How a model's image tensors lie in memory: `--memory-format auto|contiguous|channels-last`.
//
// Channels-last (NHWC) lays every 4-D parameter and buffer out channel-fastest; the
// activations follow, since a convolution whose weight is channels-last returns a
// channels-last output (oneDNN on the CPU, cuDNN on CUDA), and so do their gradients. On this
// project's CPUs, one thread, it trained the Fashion-MNIST cnn at 1.46x, ResNet-18 at 1.11x
// and MobileNetV2 at 1.52x the samples/s of the contiguous layout (docs/results.md). Only the
// layout changes: values up to summation order, shapes and what crosses the wire (codecs and
// packets read tensors contiguously) are the same.
#pragma once

#include <c10/core/Device.h>
#include <torch/nn/module.h>

#include <string>

namespace dtrain::models {

enum class MemoryFormat { kAuto, kContiguous, kChannelsLast };

MemoryFormat parse_memory_format(const std::string& text);
std::string to_string(MemoryFormat format);

// auto: channels-last on the CPU for a module with 4-D parameters (convolutions), contiguous
// otherwise and on CUDA (where channels-last pays with the reduced precision of tensor cores,
// which dtrain does not use). Never kAuto.
MemoryFormat resolve_memory_format(MemoryFormat asked, const torch::nn::Module& module,
                                   const c10::Device& device);

// Moves `module` (a model, or a pipeline stage's blocks) to `device` and lays out its 4-D
// parameters and buffers as `format` resolves for it. Parameters keep their identity (an
// optimizer made before holds them).
void place(torch::nn::Module& module, const c10::Device& device, MemoryFormat format);

}  // namespace dtrain::models
