// What a pipeline step reports to the driver: the loss rank's sums over the mini-batch, one
// small message (comm/small_message.h) from the loss rank to rank 0 when they differ.
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <string>

namespace dtrain::parallel::pipeline {

struct StepResult {
  double loss_sum = 0;  // sum of per-sample losses
  int64_t correct = 0;
  int64_t samples = 0;
  std::array<int64_t, 4> confusion{};  // two-class tasks: models::count_confusion

  // [loss sum, correct, samples, the four confusion counts]: seven values.
  static constexpr int64_t kValues = 7;
  at::Tensor to_message() const;
  // Throws std::runtime_error (naming `from`) on a wrong size, a non-finite loss, or counts
  // that are negative, fractional or more than the samples.
  static StepResult from_message(const at::Tensor& message, const std::string& from);
};

}  // namespace dtrain::parallel::pipeline
