// Checkpoints: model parameters and buffers, optimizer state, the next epoch and the
// default generator's state, in one file written atomically (temporary file, fsync,
// rename), so a crash never leaves a half-written checkpoint behind.
#pragma once

#include <torch/nn/modules/container/sequential.h>
#include <torch/optim/optimizer.h>

#include <optional>
#include <string>

namespace dtrain::train {

std::string checkpoint_path(const std::string& dir);

void save_checkpoint(const std::string& dir, int64_t next_epoch, torch::nn::Sequential& model,
                     torch::optim::Optimizer& optimizer);

// Restores into model and optimizer and returns the next epoch; nullopt when the
// directory has no checkpoint. Throws std::runtime_error naming the file when it is corrupt.
std::optional<int64_t> load_checkpoint(const std::string& dir, torch::nn::Sequential& model,
                                       torch::optim::Optimizer& optimizer);

}  // namespace dtrain::train
