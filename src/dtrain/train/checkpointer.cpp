#include "dtrain/train/checkpointer.h"

#include <ATen/ATen.h>

#include <cstdio>
#include <stdexcept>

#include "dtrain/comm/group.h"
#include "dtrain/models/safetensors.h"

namespace dtrain::train {
namespace {

std::string at_text(const Position& at) {
  return "epoch " + std::to_string(at.epoch + (at.step == 0 ? 0 : 1)) +
         (at.step == 0 ? " end" : ", step " + std::to_string(at.step));
}

// Rank 0's text to every rank, over the group's own broadcast (length, then bytes).
std::string broadcast_text(comm::Group* group, const std::string& text) {
  if (group == nullptr || group->size() == 1) return text;
  auto length = at::full({1}, static_cast<int64_t>(text.size()), at::kLong);
  group->native_broadcast(length, 0);
  auto bytes = at::zeros({length.item<int64_t>()}, at::kByte);
  if (group->rank() == 0) std::memcpy(bytes.data_ptr(), text.data(), text.size());
  group->native_broadcast(bytes, 0);
  return std::string(reinterpret_cast<const char*>(bytes.data_ptr()),
                     static_cast<size_t>(bytes.numel()));
}

}  // namespace

Checkpointer::Checkpointer(std::string dir, comm::Group* group, std::string layout,
                           int64_t parameters, bool replicas)
    : dir_(std::move(dir)),
      group_(group),
      layout_(std::move(layout)),
      parameters_(parameters),
      replicas_(replicas && group != nullptr && group->size() > 1) {}

int Checkpointer::rank() const {
  return group_ != nullptr ? group_->rank() : 0;
}

int Checkpointer::first_failure(bool failed) const {
  const int world = group_ != nullptr ? group_->size() : 1;
  auto flags = at::zeros({world}, at::kLong);
  flags[rank()] = failed ? 1 : 0;
  if (group_ != nullptr) group_->native_all_reduce(flags, comm::ReduceOp::kSum);
  for (int r = 0; r < world; ++r)
    if (flags[r].item<int64_t>() != 0) return r;
  return -1;
}

void Checkpointer::save(const Position& at, const RankState& state) {
  const int world = group_ != nullptr ? group_->size() : 1;
  std::string error;
  ShardEntry mine;
  try {
    mine = write_shard(dir_, rank(), at,
                       {state.module, state.optimizer, state.extra, replicas_ && rank() != 0});
  } catch (const std::exception& e) {
    error = e.what();
  }
  // Every rank's entry to rank 0: [failed, bytes, crc32c, state crc32c] per rank, summed.
  auto table = at::zeros({world, 4}, at::kLong);
  table[rank()][0] = error.empty() ? 0 : 1;
  table[rank()][1] = mine.bytes;
  table[rank()][2] = static_cast<int64_t>(mine.crc32c);
  table[rank()][3] = static_cast<int64_t>(mine.state_crc32c);
  if (group_ != nullptr) group_->native_all_reduce(table, comm::ReduceOp::kSum);
  int failed = -1;
  for (int r = 0; r < world && failed < 0; ++r)
    if (table[r][0].item<int64_t>() != 0) failed = r;
  if (failed < 0 && rank() == 0) {
    Manifest m;
    m.layout = layout_;
    m.parameters = parameters_;
    m.epoch = at.epoch;
    m.step = at.step;
    for (int r = 0; r < world; ++r)
      m.shards.push_back({r, shard_name(r, at), table[r][1].item<int64_t>(),
                          static_cast<uint32_t>(table[r][2].item<int64_t>()),
                          static_cast<uint32_t>(table[r][3].item<int64_t>())});
    try {
      write_manifest(dir_, m);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  if (failed < 0) failed = first_failure(!error.empty());
  if (failed < 0) {
    remove_other_shards(dir_, rank(), shard_name(rank(), at));
    return;
  }
  // Only this attempt's own shard goes: the committed checkpoint's shards must stay.
  if (!mine.file.empty()) std::remove((dir_ + "/" + mine.file).c_str());
  const std::string prefix = "checkpoint at " + at_text(at) + " failed";
  const std::string intact = "; the last committed checkpoint in " + dir_ + " is intact";
  if (!error.empty()) throw std::runtime_error(prefix + ": " + error + intact);
  throw std::runtime_error(prefix + ": rank " + std::to_string(failed) +
                           " could not write its part (see its error)" + intact);
}

std::optional<Position> Checkpointer::restore(const RankState& state) {
  // Rank 0 reads and vets the manifest; every rank gets its text, or the reason it is refused.
  std::string text;
  if (rank() == 0) {
    try {
      const auto found = read_manifest_text(dir_);
      if (found) {
        const Manifest m = Manifest::parse(*found, manifest_path(dir_));
        if (m.layout != layout_ || m.parameters != parameters_) {
          throw std::runtime_error(
              manifest_path(dir_) + " was written by " + m.layout + " (" +
              std::to_string(m.parameters) + " parameters); this run is " + layout_ + " (" +
              std::to_string(parameters_) +
              " parameters): resume with the same model, -n, --parallel and partition flags");
        }
        text = *found;
      }
    } catch (const std::exception& e) {
      text = std::string("!") + e.what();
    }
  }
  text = broadcast_text(group_, text);
  if (text.empty()) return std::nullopt;
  if (text[0] == '!') {
    throw std::runtime_error(rank() == 0 ? text.substr(1)
                                         : "rank 0 refused the checkpoint: " + text.substr(1));
  }
  std::string error, where;
  ShardContents contents;
  Position manifest_at;
  try {
    const Manifest m = Manifest::parse(text, manifest_path(dir_));
    const int world = group_ != nullptr ? group_->size() : 1;
    if (static_cast<int>(m.shards.size()) != world)
      throw std::runtime_error(manifest_path(dir_) + " has " + std::to_string(m.shards.size()) +
                               " shards for " + std::to_string(world) + " ranks");
    const ShardEntry& entry = m.shards[static_cast<size_t>(rank())];
    where = dir_ + "/" + entry.file;
    contents = read_shard_contents(dir_, entry);
    manifest_at = {m.epoch, m.step};
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (replicas_) {
    agree(error);
    error = receive_replicated(contents);
  }
  Position at;
  if (error.empty()) {
    try {
      at = restore_shard_contents(contents, state, where);
      if (at.epoch != manifest_at.epoch || at.step != manifest_at.step)
        throw std::runtime_error(where + " holds another position than the manifest's");
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  agree(error);
  return at;
}

void Checkpointer::agree(const std::string& error) const {
  const int failed = first_failure(!error.empty());
  if (failed < 0) return;
  if (!error.empty()) throw std::runtime_error(error);
  throw std::runtime_error("rank " + std::to_string(failed) +
                           " could not restore its checkpoint shard (see its error)");
}

std::string Checkpointer::receive_replicated(ShardContents& contents) const {
  std::string bytes, error;
  if (rank() == 0) {
    std::map<std::string, at::Tensor> replicated;
    for (const auto& [name, t] : contents.tensors)
      if (is_replicated(name)) replicated[name] = t;
    try {
      bytes = models::safetensors_bytes(replicated);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  agree(error);
  bytes = broadcast_text(group_, bytes);
  if (rank() == 0) return {};
  try {
    const models::SafetensorsFile from_rank0 =
        models::parse_safetensors(bytes.data(), bytes.size(), "rank 0's module and optimizer");
    for (const auto& [name, t] : from_rank0.tensors)
      contents.tensors[name] = t;
  } catch (const std::exception& e) {
    return e.what();
  }
  return {};
}

}  // namespace dtrain::train
