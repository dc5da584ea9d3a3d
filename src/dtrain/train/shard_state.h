// A rank's training state as named tensors and back: the contents of a checkpoint shard
// (train/checkpoint.h stores them as a safetensors file). Defined once here:
//
//   model/<name>              every parameter and buffer of the module, by its own name
//   optimizer/lr/<g>          the learning rate of parameter group g (float64 [1])
//   optimizer/<i>/<field>     the state of the i-th parameter (groups in order), where it has
//                             one: SGD momentum_buffer; Adam and AdamW exp_avg, exp_avg_sq,
//                             max_exp_avg_sq (amsgrad only) and step (int64 [1])
//   rng                       the default CPU generator's state (uint8)
//   position                  epoch, step, loss_sum, correct, seen (float64 [5])
//   extra/<name>              the mode's own state (RankState::extra), where it has one:
//                             DDP's error-feedback residuals (parallel/ddp.h)
//
// A DDP rank other than 0 (RankState::replica) saves no model/ and optimizer/<i>/ tensors:
// they equal rank 0's, which train/checkpointer.h sends it on resume.
//
// plus the metadata {"optimizer": "sgd" | "adam" | "adamw"}. Restoring checks every name,
// dtype and shape against the model and optimizer it loads into before changing either,
// so a shard of another model leaves them untouched and says which tensor differs.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <string>

#include "dtrain/train/checkpoint.h"

namespace dtrain::train {

struct ShardContents {
  std::map<std::string, at::Tensor> tensors;
  std::map<std::string, std::string> metadata;
};

// Throws std::invalid_argument for an optimizer other than SGD, Adam and AdamW. A replica's
// (RankState::replica) leaves out what is_replicated() names.
ShardContents shard_contents(const Position& at, const RankState& state);

// The tensors every DDP rank holds alike and only rank 0's shard saves: "model/..." and
// the per-parameter "optimizer/<i>/..." (not the learning rates).
bool is_replicated(const std::string& tensor_name);

// Loads `contents` into `state` and returns the position; throws std::runtime_error naming
// `where` and the first tensor missing, extra, or of another dtype or shape.
Position restore_shard_contents(const ShardContents& contents, const RankState& state,
                                const std::string& where);

}  // namespace dtrain::train
