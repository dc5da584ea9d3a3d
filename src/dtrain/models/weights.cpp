#include "dtrain/models/weights.h"

#include <torch/torch.h>

#include <set>
#include <stdexcept>

#include "dtrain/base/shape_text.h"
#include "dtrain/models/registry.h"
#include "dtrain/models/safetensors.h"

namespace dtrain::models {
namespace {

std::vector<std::string> checkpoint_names(const ModelConfig& config, const std::string& name) {
  const ModelFamily* family = find_model(config.name);
  return family != nullptr && family->weight_names != nullptr ? family->weight_names(name)
                                                              : std::vector<std::string>{name};
}

std::string listed(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < 5; ++i)
    s += (i ? ", " : "") + names[i];
  if (names.size() > 5) s += ", ... (" + std::to_string(names.size()) + ")";
  return s;
}

}  // namespace

WeightsReport load_weights(torch::nn::Sequential& model, const ModelConfig& config,
                           const std::string& path) {
  const SafetensorsFile file = read_safetensors(path);
  WeightsReport report;
  std::set<std::string> used;
  torch::NoGradGuard no_grad;
  auto copy_into = [&](const std::string& name, at::Tensor& target) {
    for (const auto& candidate : checkpoint_names(config, name)) {
      const auto it = file.tensors.find(candidate);
      if (it == file.tensors.end()) continue;
      const at::Tensor& source = it->second;
      if (source.sizes() != target.sizes())
        throw std::runtime_error(path + ": '" + candidate + "' has shape " +
                                 shape_text(source.sizes()) + ", the model's " + name + " " +
                                 shape_text(target.sizes()));
      if (target.is_floating_point() && !source.is_floating_point())
        throw std::runtime_error(path + ": '" + candidate + "' holds " +
                                 c10::toString(source.scalar_type()) + ", not floating point");
      target.copy_(source);
      used.insert(candidate);
      report.loaded.push_back(name);
      return;
    }
    report.missing.push_back(name);
  };
  for (auto& p : model->named_parameters())
    copy_into(p.key(), p.value());
  for (auto& b : model->named_buffers())
    copy_into(b.key(), b.value());
  for (const auto& [name, tensor] : file.tensors)
    if (!used.count(name)) report.unexpected.push_back(name);
  if (report.loaded.empty())
    throw std::runtime_error(path + ": none of its " + std::to_string(file.tensors.size()) +
                             " tensors is a weight of the " + config.name + " model");
  return report;
}

std::string summary(const WeightsReport& r) {
  std::string s = "loaded " + std::to_string(r.loaded.size()) + " tensors";
  if (!r.missing.empty()) s += "; missing (left as initialised): " + listed(r.missing);
  if (!r.unexpected.empty()) s += "; unexpected (ignored): " + listed(r.unexpected);
  return s;
}

}  // namespace dtrain::models
