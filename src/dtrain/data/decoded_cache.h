// Decoded copies of gzipped dataset files, kept between runs.
//
// Inflating Fashion-MNIST's 26 MB of training images takes half a second of a core (zlib),
// and every process of a run pays it at its start: each rank, and each replica that joins a
// running elastic run, where it is part of the time to train again. The decoded bytes are
// kept in a cache directory and read back in a few milliseconds.
//
// Contracts:
// - The directory: DTRAIN_CACHE_DIR, else $XDG_CACHE_HOME/dtrain, else $HOME/.cache/dtrain;
//   DTRAIN_CACHE_DIR=none keeps nothing.
// - A copy is found by the compressed file's content (its size and CRC-32C, and the gzip
//   trailer's CRC-32 and length of the decoded bytes), never by its name or time: a file
//   rewritten in place with other bytes misses.
// - A copy is a header (magic, length, CRC-32C of the decoded bytes) then the bytes; one whose
//   header or checksum does not hold is ignored (and replaced by the next keep()).
// - keep() is best effort: a temporary file renamed into place (processes that decode at
//   once each write a whole copy, one wins); failures are ignored.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dtrain::data {

class DecodedCache {
 public:
  // For the file at `path`: nothing where the cache is off or the file is not gzipped (or
  // cannot be read: the decoder reports that).
  static std::optional<DecodedCache> for_file(const std::string& path);

  // The decoded bytes kept for the file, or null (none kept, or a damaged copy).
  std::shared_ptr<std::vector<uint8_t>> read() const;
  // Keeps the decoded bytes, given as pieces in order.
  void keep(const std::vector<std::pair<const uint8_t*, size_t>>& pieces) const;

  const std::string& copy_path() const { return copy_path_; }

 private:
  explicit DecodedCache(std::string copy_path) : copy_path_(std::move(copy_path)) {}
  std::string copy_path_;
};

// The directory the cache keeps its copies in ("" where it is off).
std::string decoded_cache_dir();

}  // namespace dtrain::data
