// What every pipeline rank needs to build the same model but only rank 0 learns, from the
// data it loads: one small message (comm/small_message.h) broadcast from rank 0 before the
// ranks build the model.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "dtrain/models/registry.h"

namespace dtrain::train {

struct ModelShape {
  bool loaded = true;  // false: rank 0 could not load the data, and every rank stops
  int64_t num_classes = 0;
  int64_t vocab = 0;  // text models: the tokenizer's vocabulary and padding id
  int64_t pad_id = 0;
  std::vector<int64_t> input_shape;  // one sample's, at most 3 dimensions

  static ModelShape of(const models::ModelConfig& config);
  void apply_to(models::ModelConfig& config) const;

  // [classes (-1: not loaded), vocabulary, padding id, dimensions, shape (3, zero-padded)],
  // int64.
  static constexpr int64_t kValues = 7;
  at::Tensor to_message() const;
  // Throws std::runtime_error (naming `from`) on a wrong size or a field out of range.
  static ModelShape from_message(const at::Tensor& message, const std::string& from);
};

}  // namespace dtrain::train
