// Checkpoint files, defined once: a directory of per-rank shards and a manifest naming them.
//
//   DIR/manifest.json                 written last by rank 0, atomically: the commit point
//   DIR/shard-r<R>-e<E>-s<S>.safetensors
//                                     rank R's state after S training steps of epoch E
//                                     (S = 0: at the end of epoch E-1)
//
// A shard is a safetensors file (models/safetensors.h) of the tensors train/shard_state.h
// names: this rank's module (the whole model, or a pipeline rank's stages), its optimizer's
// state, the default CPU generator and the position (where the loop stands, with the
// running sums of a part-done epoch). Not a LibTorch archive: its reader (TorchScript's
// importer) terminates the process on some malformed files, and a shard's reader must
// only ever throw (tests/fuzz drives it with corrupt shards). Every file is
// written to a temporary name, fsynced and renamed, so none is ever half-written; shards
// have new names at every checkpoint, so the manifest the directory holds always names
// shards that exist (the last good checkpoint survives a crash or a full disk at any
// moment). The manifest records each shard's size and CRC32C, checked before loading.
// docs/wire-format.md has the manifest's fields.
#pragma once

#include <torch/nn/modules/container/sequential.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dtrain::train {

// Where the training loop stands at a checkpoint.
struct Position {
  int64_t epoch = 0;  // the epoch to run (0-based)
  int64_t step = 0;   // mini-batches of it already done
  // Running sums of the part done (step > 0), so the epoch's statistics come out whole.
  double loss_sum = 0;
  int64_t correct = 0, seen = 0;
};

// State a mode keeps between steps besides its module and optimizer (DDP's error-feedback
// residuals), saved as "extra/<name>" (train/shard_state.h).
struct ExtraState {
  // Its tensors by name, as they stand.
  std::function<std::map<std::string, at::Tensor>()> save;
  // Throws std::runtime_error saying why `saved` does not fit this run; changes nothing.
  std::function<void(const std::map<std::string, at::Tensor>&)> check;
  // Replaces the state with `saved`, which check() accepted.
  std::function<void(const std::map<std::string, at::Tensor>&)> restore;
};

// What one rank saves and restores.
struct RankState {
  torch::nn::Sequential& module;
  torch::optim::Optimizer& optimizer;
  const ExtraState* extra = nullptr;  // none: the shard holds no "extra/" tensors
  // A DDP rank other than 0: its module and optimizer state are rank 0's, so its shard
  // holds neither (train/checkpointer.h sends rank 0's on resume).
  bool replica = false;
};

struct ShardContents;  // train/shard_state.h

struct ShardEntry {
  int rank = 0;
  std::string file;  // a name inside the checkpoint directory
  int64_t bytes = 0;
  uint32_t crc32c = 0;  // of the file
  // Of the state itself: every tensor and metadata entry of train/shard_state.h, by name.
  // What says two runs ended identically, independent of how the file lays them out.
  uint32_t state_crc32c = 0;
};

struct Manifest {
  static constexpr int kVersion = 2;  // 1: LibTorch-archive shards
  // What must be the same to resume: mode, world size and (pipeline) partition.
  std::string layout;
  int64_t parameters = 0;  // of the whole model
  int64_t epoch = 0, step = 0;
  std::vector<ShardEntry> shards;  // one per rank, in rank order

  std::string to_json() const;
  // Throws std::runtime_error naming `source` when the text is not a manifest.
  static Manifest parse(const std::string& text, const std::string& source);
};

std::string manifest_path(const std::string& dir);
// The state fingerprint of ShardEntry::state_crc32c.
uint32_t state_crc32c(const Position& at, const RankState& state);
std::string shard_name(int rank, const Position& at);

// Writes this rank's shard (creating `dir`) and returns its entry. Throws
// std::runtime_error naming the file on failure (no file is left behind then).
ShardEntry write_shard(const std::string& dir, int rank, const Position& at,
                       const RankState& state);
// Checks the file against `entry` (present, size, CRC32C), then loads it into `state` and
// returns its position. Throws std::runtime_error naming the file and what is wrong.
Position read_shard(const std::string& dir, const ShardEntry& entry, const RankState& state);
// The shard's tensors and metadata, its size and CRC32C checked; nothing restored.
ShardContents read_shard_contents(const std::string& dir, const ShardEntry& entry);

// Atomically replaces the manifest. Throws std::runtime_error on failure (the old one stays).
void write_manifest(const std::string& dir, const Manifest& manifest);
// The manifest's text; nullopt when the directory has none.
std::optional<std::string> read_manifest_text(const std::string& dir);

// Removes this rank's shards other than `keep` (after a newer manifest committed).
void remove_other_shards(const std::string& dir, int rank, const std::string& keep);

}  // namespace dtrain::train

namespace dtrain::train {

// Without a process group (tests, tools): rank `rank`'s state from the manifest's shard;
// nullopt when the directory has no checkpoint. Throws as read_shard.
std::optional<Position> load_checkpoint(const std::string& dir, int rank, const RankState& state);

}  // namespace dtrain::train
