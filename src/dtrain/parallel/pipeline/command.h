// The driver/follower command protocol: rank 0 tells every other rank what to do next
// (train or evaluate a mini-batch of N samples at a learning rate, report, calibrate
// the link codecs, stop) with one
// small message of three doubles [kind, batch, lr]. Defined once here: the driver writes
// it with to_message, a follower reads it with from_message, which rejects anything that
// is not a valid command.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

namespace dtrain::parallel::pipeline {

// kCalibrate: --compress auto measures and re-chooses link codecs (link_tuner.h).
enum class CommandKind { kTrain = 1, kEval = 2, kReport = 3, kStop = 4, kCalibrate = 5 };
constexpr int kFirstCommandKind = 1, kLastCommandKind = 5;

struct Command {
  CommandKind kind = CommandKind::kStop;
  int64_t batch = 0;  // samples in the mini-batch (train, eval)
  double lr = 0;      // train: the learning rate of this step
};

constexpr int64_t kCommandValues = 3;

at::Tensor to_message(const Command& command);
// Throws std::runtime_error (with `from` in the message) on a wrong size, an unknown kind,
// a negative or fractional batch, or a non-finite learning rate.
Command from_message(const at::Tensor& message, const std::string& from);

}  // namespace dtrain::parallel::pipeline
