#include "dtrain/models/memory_format.h"

#include <torch/torch.h>

#include <stdexcept>

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

MemoryFormat resolve_memory_format(MemoryFormat asked, const ModelConfig& model,
                                   const c10::Device& device) {
  if (asked != MemoryFormat::kAuto) return asked;
  const bool measured_faster = model.name == "resnet18" || model.name == "mobilenetv2";
  return device.is_cpu() && measured_faster ? MemoryFormat::kChannelsLast
                                            : MemoryFormat::kContiguous;
}

void place(torch::nn::Module& module, const c10::Device& device, MemoryFormat resolved) {
  if (resolved == MemoryFormat::kAuto) throw std::logic_error("place: memory format unresolved");
  module.to(device);
  if (resolved != MemoryFormat::kChannelsLast) return;
  torch::NoGradGuard no_grad;
  for (auto& p : module.parameters())
    if (p.dim() == 4) p.set_data(p.contiguous(at::MemoryFormat::ChannelsLast));
  for (auto& b : module.buffers())
    if (b.dim() == 4) b.set_data(b.contiguous(at::MemoryFormat::ChannelsLast));
}

}  // namespace dtrain::models
