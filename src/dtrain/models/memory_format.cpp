#include "dtrain/models/memory_format.h"

#include <torch/torch.h>

#include "dtrain/base/names.h"

namespace dtrain::models {
namespace {
const EnumNames<MemoryFormat> kFormatNames("memory format",
                                           {{MemoryFormat::kAuto, "auto"},
                                            {MemoryFormat::kContiguous, "contiguous"},
                                            {MemoryFormat::kChannelsLast, "channels-last"}});
}  // namespace

MemoryFormat parse_memory_format(const std::string& text) {
  return kFormatNames.parse(text);
}

std::string to_string(MemoryFormat format) {
  return kFormatNames.to_string(format);
}

MemoryFormat resolve_memory_format(MemoryFormat asked, const torch::nn::Module& module,
                                   const c10::Device& device) {
  if (asked != MemoryFormat::kAuto) return asked;
  if (!device.is_cpu()) return MemoryFormat::kContiguous;
  for (const auto& p : module.parameters())
    if (p.dim() == 4) return MemoryFormat::kChannelsLast;
  return MemoryFormat::kContiguous;
}

namespace {
// NHWC strides set explicitly: contiguous(ChannelsLast) returns a tensor it finds already
// laid out both ways unchanged (one channel, or a 1x1 kernel: [O, I, 1, 1]), and a
// convolution then reads it as contiguous; a depthwise-separable network's weights are all
// such, and MobileNetV2 on one-channel images stayed contiguous throughout.
at::Tensor to_channels_last(const at::Tensor& t) {
  const auto n = t.sizes();
  at::Tensor out = at::empty_strided(n, {n[1] * n[2] * n[3], 1, n[3] * n[1], n[1]}, t.options());
  out.copy_(t);
  return out;
}
}  // namespace

void place(torch::nn::Module& module, const c10::Device& device, MemoryFormat format) {
  module.to(device);
  if (resolve_memory_format(format, module, device) != MemoryFormat::kChannelsLast) return;
  torch::NoGradGuard no_grad;
  for (auto& p : module.parameters())
    if (p.dim() == 4) p.set_data(to_channels_last(p));
  for (auto& b : module.buffers())
    if (b.dim() == 4) b.set_data(to_channels_last(b));
}

}  // namespace dtrain::models
