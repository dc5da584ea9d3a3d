#include "dtrain/train/checkpoint.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ATen/ATen.h>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "dtrain/base/crc32c.h"
#include "dtrain/models/safetensors.h"
#include "dtrain/train/shard_state.h"

namespace dtrain::train {
namespace {

constexpr const char* kFormat = "dtrain-checkpoint";

std::string system_error(const std::string& what, const std::string& path) {
  return "cannot " + what + " " + path + ": " + std::strerror(errno);
}

void make_dir(const std::string& dir) {
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
    throw std::runtime_error(system_error("create checkpoint directory", dir));
}

// fsync a directory by path, so a rename in it is durable.
void sync_directory(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  fsync(fd);
  close(fd);
}

// The whole file; nullopt when it cannot be opened (absent).
std::optional<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) throw std::runtime_error(system_error("read", path));
  return std::move(text).str();
}

// Writes all of `data` to a new file at `path` and fsyncs it; throws std::runtime_error with
// the system's reason (a full disk: "No space left on device") and removes the file.
void write_file(const std::string& path, const char* data, size_t size) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error(system_error("create", path));
  size_t done = 0;
  while (done < size) {
    const ssize_t n = write(fd, data + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  bool ok = done == size && fsync(fd) == 0;
  std::string error = ok ? "" : system_error("write", path);
  if (close(fd) != 0 && ok) {  // some file systems report a full disk only here
    ok = false;
    error = system_error("write", path);
  }
  if (!ok) {
    unlink(path.c_str());
    throw std::runtime_error(error);
  }
}

// Renames a temporary file written (and fsynced) by write_file into place, then fsyncs the
// directory: the file appears whole or not at all.
void commit_file(const std::string& tmp, const std::string& final_path, const std::string& dir) {
  if (rename(tmp.c_str(), final_path.c_str()) != 0) {
    const std::string error = system_error("write", final_path);
    unlink(tmp.c_str());
    throw std::runtime_error(error);
  }
  sync_directory(dir);
}

std::string hex32(uint32_t v) {
  char text[16];
  std::snprintf(text, sizeof(text), "%08x", v);
  return text;
}

uint32_t parse_hex32(const std::string& text) {
  if (text.size() != 8 || text.find_first_not_of("0123456789abcdef") != std::string::npos)
    throw std::runtime_error("bad crc32c '" + text + "' (8 lower-case hex digits)");
  return static_cast<uint32_t>(std::stoul(text, nullptr, 16));
}

// A non-negative integer field (JSON's numbers may be fractions or out of range: refused
// here, where a plain get<int64_t>() would convert them silently).
int64_t count_field(const nlohmann::json& j, const char* key) {
  const auto& v = j.at(key);
  if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > INT64_MAX) ||
      v.get<int64_t>() < 0)
    throw std::runtime_error(std::string("\"") + key +
                             "\" is not a non-negative integer: " + v.dump());
  return v.get<int64_t>();
}

uint32_t extend(uint32_t crc, const std::string& text) {
  return crc32c(text.data(), text.size() + 1, crc);  // with its NUL: names stay apart
}

// The fingerprint of ShardEntry::state_crc32c, over contents already gathered.
uint32_t contents_crc32c(const ShardContents& contents) {
  uint32_t crc = 0;
  for (const auto& [key, value] : contents.metadata)
    crc = extend(extend(crc, key), value);
  for (const auto& [name, tensor] : contents.tensors) {
    const at::Tensor t = tensor.detach().to(at::kCPU).contiguous();
    crc =
        crc32c(t.data_ptr(), static_cast<size_t>(t.numel()) * t.element_size(), extend(crc, name));
  }
  return crc;
}

}  // namespace

uint32_t state_crc32c(const Position& at, const RankState& state) {
  return contents_crc32c(shard_contents(at, state));
}

std::string manifest_path(const std::string& dir) {
  return dir + "/manifest.json";
}

std::string shard_name(int rank, const Position& at) {
  return "shard-r" + std::to_string(rank) + "-e" + std::to_string(at.epoch) + "-s" +
         std::to_string(at.step) + ".safetensors";
}

std::string Manifest::to_json() const {
  nlohmann::json j;
  j["format"] = kFormat;
  j["version"] = kVersion;
  j["layout"] = layout;
  j["parameters"] = parameters;
  j["epoch"] = epoch;
  j["step"] = step;
  j["shards"] = nlohmann::json::array();
  for (const auto& s : shards)
    j["shards"].push_back({{"rank", s.rank},
                           {"file", s.file},
                           {"bytes", s.bytes},
                           {"crc32c", hex32(s.crc32c)},
                           {"state_crc32c", hex32(s.state_crc32c)}});
  return j.dump(1) + "\n";
}

Manifest Manifest::parse(const std::string& text, const std::string& source) {
  try {
    const auto j = nlohmann::json::parse(text);
    if (j.at("format") != kFormat) throw std::runtime_error("not a dtrain checkpoint manifest");
    if (j.at("version") != kVersion)
      throw std::runtime_error("manifest version " + j.at("version").dump() +
                               ", this dtrain reads " + std::to_string(kVersion));
    Manifest m;
    m.layout = j.at("layout").get<std::string>();
    m.parameters = count_field(j, "parameters");
    m.epoch = count_field(j, "epoch");
    m.step = count_field(j, "step");
    for (const auto& s : j.at("shards")) {
      ShardEntry e;
      e.rank = static_cast<int>(std::min<int64_t>(count_field(s, "rank"), INT32_MAX));
      e.file = s.at("file").get<std::string>();
      e.bytes = count_field(s, "bytes");
      e.crc32c = parse_hex32(s.at("crc32c").get<std::string>());
      e.state_crc32c = parse_hex32(s.at("state_crc32c").get<std::string>());
      // A shard's name follows from its rank and the position, so no name reaches outside
      // the directory.
      if (e.rank != static_cast<int>(m.shards.size()) ||
          e.file != shard_name(e.rank, Position{m.epoch, m.step}))
        throw std::runtime_error("bad shard entry " + s.dump());
      m.shards.push_back(e);
    }
    if (m.shards.empty()) throw std::runtime_error("no shards");
    return m;
  } catch (const std::exception& e) {
    throw std::runtime_error(source + ": corrupt checkpoint manifest: " + e.what());
  }
}

ShardEntry write_shard(const std::string& dir, int rank, const Position& at,
                       const RankState& state) {
  make_dir(dir);
  ShardEntry entry;
  entry.rank = rank;
  entry.file = shard_name(rank, at);
  const std::string final_path = dir + "/" + entry.file;
  const std::string tmp = final_path + ".tmp." + std::to_string(getpid());
  // Made in memory and written by us, so a full disk is an error, not a torn file.
  try {
    const ShardContents contents = shard_contents(at, state);
    const std::string bytes = models::safetensors_bytes(contents.tensors, contents.metadata);
    write_file(tmp, bytes.data(), bytes.size());
    entry.bytes = static_cast<int64_t>(bytes.size());
    entry.crc32c = crc32c(bytes.data(), bytes.size());
    entry.state_crc32c = contents_crc32c(contents);
  } catch (const std::exception& e) {
    throw std::runtime_error("cannot write checkpoint shard " + final_path + ": " + e.what());
  }
  commit_file(tmp, final_path, dir);
  return entry;
}

Position read_shard(const std::string& dir, const ShardEntry& entry, const RankState& state) {
  return restore_shard_contents(read_shard_contents(dir, entry), state, dir + "/" + entry.file);
}

ShardContents read_shard_contents(const std::string& dir, const ShardEntry& entry) {
  const std::string path = dir + "/" + entry.file;
  // Read once: the bytes checked are the bytes loaded.
  const std::optional<std::string> bytes = read_file(path);
  if (!bytes)
    throw std::runtime_error("checkpoint shard " + path + " (rank " + std::to_string(entry.rank) +
                             ") is missing");
  const uint32_t crc = crc32c(bytes->data(), bytes->size());
  const auto size = static_cast<int64_t>(bytes->size());
  if (size != entry.bytes || crc != entry.crc32c) {
    throw std::runtime_error("checkpoint shard " + path + " is corrupt: " + std::to_string(size) +
                             " bytes with CRC32C " + hex32(crc) + ", the manifest says " +
                             std::to_string(entry.bytes) + " bytes with " + hex32(entry.crc32c));
  }
  models::SafetensorsFile file = models::parse_safetensors(bytes->data(), bytes->size(), path);
  return {std::move(file.tensors), std::move(file.metadata)};
}

void write_manifest(const std::string& dir, const Manifest& manifest) {
  make_dir(dir);
  const std::string final_path = manifest_path(dir);
  const std::string tmp = final_path + ".tmp." + std::to_string(getpid());
  const std::string text = manifest.to_json();
  write_file(tmp, text.data(), text.size());
  commit_file(tmp, final_path, dir);
}

std::optional<std::string> read_manifest_text(const std::string& dir) {
  return read_file(manifest_path(dir));
}

void remove_other_shards(const std::string& dir, int rank, const std::string& keep) {
  const std::string prefix = "shard-r" + std::to_string(rank) + "-";
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return;
  std::vector<std::string> stale;
  while (const dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind(prefix, 0) == 0 && name != keep) stale.push_back(name);
  }
  closedir(d);
  for (const auto& name : stale)
    unlink((dir + "/" + name).c_str());
}

std::optional<Position> load_checkpoint(const std::string& dir, int rank, const RankState& state) {
  const auto text = read_manifest_text(dir);
  if (!text) return std::nullopt;
  const Manifest m = Manifest::parse(*text, manifest_path(dir));
  if (rank < 0 || rank >= static_cast<int>(m.shards.size()))
    throw std::runtime_error(manifest_path(dir) + " has no shard of rank " + std::to_string(rank));
  return read_shard(dir, m.shards[static_cast<size_t>(rank)], state);
}

}  // namespace dtrain::train
