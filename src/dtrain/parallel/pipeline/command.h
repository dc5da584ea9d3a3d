// The driver/follower command protocol: rank 0 tells every other rank what to do next
// (train or evaluate a mini-batch of N samples at a learning rate, report, calibrate
// the link codecs, checkpoint, switch the wire check, stop) with one small message
// (comm/small_message.h) of five values [kind, batch or wire check, lr, epoch, step].
// Defined once here: the driver writes it with to_message, a follower reads it with
// from_message, which rejects anything that is not a valid command.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

namespace dtrain::parallel::pipeline {

// kCalibrate: --compress auto measures and re-chooses link codecs (link_tuner.h).
// kCheckpoint: every rank saves its shard of the position (epoch, step) (train/checkpointer.h).
// kWireCheck: every rank turns the wire check off (batch 0) or on (batch 1) for the messages
// that follow; nothing is in flight between two commands, so both ends of every link switch
// between the same two messages (--measure-wire-check).
// kSetCodecs: the driver sends each rank the codecs of its links next, as after kCalibrate
// (an auto runoff switching between two assignments, parallel/auto_runoff.h).
enum class CommandKind {
  kTrain = 1,
  kEval = 2,
  kReport = 3,
  kStop = 4,
  kCalibrate = 5,
  kCheckpoint = 6,
  kWireCheck = 7,
  kSetCodecs = 8
};
constexpr int kFirstCommandKind = 1, kLastCommandKind = 8;

struct Command {
  CommandKind kind = CommandKind::kStop;
  int64_t batch = 0;  // samples in the mini-batch (train, eval)
  double lr = 0;      // train: the learning rate of this step
  int64_t epoch = 0;  // checkpoint: the position saved
  int64_t step = 0;
  bool wire_check = false;  // kWireCheck: on or off (the message's second value, 0 or 1)
};

constexpr int64_t kCommandValues = 5;

at::Tensor to_message(const Command& command);
// Throws std::runtime_error (with `from` in the message) on a wrong size, an unknown kind,
// a negative or fractional batch, epoch or step, a wire check that is neither 0 nor 1, or a
// non-finite learning rate.
Command from_message(const at::Tensor& message, const std::string& from);

}  // namespace dtrain::parallel::pipeline
