// Pretrained weights from a safetensors file into a model of the zoo (--weights).
#pragma once

#include <torch/nn/modules/container/sequential.h>

#include <string>
#include <vector>

#include "dtrain/models/registry.h"

namespace dtrain::models {

struct WeightsReport {
  std::vector<std::string> loaded;      // the model's names
  std::vector<std::string> missing;     // the model's names the file lacks (left as made)
  std::vector<std::string> unexpected;  // the file's names the model has no use for
};

// Copies every parameter and buffer of `model` found in the file under its checkpoint
// name (Hugging Face's for roberta, the model's own otherwise), converting floating-point
// dtypes. A tensor whose shape differs, or an integer tensor for a floating-point
// parameter, is a std::runtime_error naming both; so is a file that provides nothing.
WeightsReport load_weights(torch::nn::Sequential& model, const ModelConfig& config,
                           const std::string& path);

// One line for people: counts, and the names missing or unexpected (the first few).
std::string summary(const WeightsReport& report);

}  // namespace dtrain::models
