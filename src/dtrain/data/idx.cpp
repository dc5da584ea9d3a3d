// IDX files (http://yann.lecun.com/exdb/mnist/): 2 zero bytes, a type byte (0x08 unsigned
// byte), a dimension count, big-endian uint32 dimensions, then the data. zlib reads gzipped
// and plain files alike; a gzipped file's decoded bytes are kept for the next run
// (decoded_cache.h).
#include <ATen/ATen.h>
#include <zlib.h>

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <vector>

#include "dtrain/data/dataset.h"
#include "dtrain/data/decoded_cache.h"

namespace dtrain::data {
namespace {

// A byte tensor over bytes it keeps alive, from `offset` on (no copy: the images of
// Fashion-MNIST are 47 MB).
at::Tensor tensor_over(std::shared_ptr<std::vector<uint8_t>> owned, size_t offset,
                       const std::vector<int64_t>& dims) {
  uint8_t* start = owned->data() + offset;
  return at::from_blob(
      start, dims, [owned](void*) {}, at::TensorOptions(at::kByte));
}

// Where an IDX file's bytes come from.
class Source {
 public:
  virtual ~Source() = default;
  // Exactly n bytes at `offset`, the next ones; or an error naming the file and offset.
  virtual void read(void* dst, size_t n, int64_t offset, const char* what) = 0;
  // The data, `total` bytes after a header of `header` bytes, and nothing after it.
  virtual at::Tensor data(const std::vector<int64_t>& dims, int64_t total, int64_t header) = 0;
};

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};

// The file itself, through zlib.
class FileSource final : public Source {
 public:
  explicit FileSource(const std::string& path) : path_(path), f_(gzopen(path.c_str(), "rb")) {
    if (!f_) throw std::runtime_error(path + ": cannot open");
    gzbuffer(f_.get(), 1 << 20);
  }

  void read(void* dst, size_t n, int64_t offset, const char* what) override {
    size_t done = 0;
    while (done < n) {
      const unsigned chunk = static_cast<unsigned>(std::min<size_t>(n - done, 1u << 30));
      const int got = gzread(f_.get(), static_cast<char*>(dst) + done, chunk);
      if (got <= 0) {
        int err = 0;
        const char* msg = gzerror(f_.get(), &err);
        throw std::runtime_error(path_ + ": truncated or unreadable at byte " +
                                 std::to_string(offset + static_cast<int64_t>(done)) +
                                 " (reading " + what +
                                 (err < 0 ? std::string(": ") + msg : std::string()) + ")");
      }
      done += static_cast<size_t>(got);
    }
  }

  // Read in pieces and made a tensor once it all arrived: a corrupt header declaring
  // gigabytes costs an error at the end of a short file, not that allocation.
  at::Tensor data(const std::vector<int64_t>& dims, int64_t total, int64_t header) override {
    auto bytes = std::make_shared<std::vector<uint8_t>>();
    while (bytes->size() < static_cast<size_t>(total)) {
      const size_t done = bytes->size();  // each piece as large as what arrived before it
      bytes->resize(done +
                    std::min(std::max<size_t>(done, 64 << 10), static_cast<size_t>(total) - done));
      read(bytes->data() + done, bytes->size() - done, header + static_cast<int64_t>(done),
           "the data");
    }
    char extra;
    if (gzread(f_.get(), &extra, 1) > 0) {
      throw std::runtime_error(path_ + ": byte " + std::to_string(header + total) +
                               ": unexpected data after the last item");
    }
    return tensor_over(std::move(bytes), 0, dims);
  }

 private:
  std::string path_;
  std::unique_ptr<gzFile_s, GzCloser> f_;
};

// A decoded copy from the cache: kept only after it parsed, so an error here means the
// copy is not what was kept (the caller decodes the file instead).
class CopySource final : public Source {
 public:
  explicit CopySource(std::shared_ptr<std::vector<uint8_t>> bytes) : bytes_(std::move(bytes)) {}

  void read(void* dst, size_t n, int64_t, const char*) override {
    if (bytes_->size() - at_ < n) throw std::runtime_error("a short decoded copy");
    std::copy_n(bytes_->data() + at_, n, static_cast<uint8_t*>(dst));
    at_ += n;
  }

  at::Tensor data(const std::vector<int64_t>& dims, int64_t total, int64_t header) override {
    if (bytes_->size() != static_cast<size_t>(header + total))
      throw std::runtime_error("a decoded copy of another length");
    return tensor_over(bytes_, static_cast<size_t>(header), dims);
  }

 private:
  std::shared_ptr<std::vector<uint8_t>> bytes_;
  size_t at_ = 0;
};

// The tensor, and the header's bytes (for the cache).
std::pair<at::Tensor, std::vector<uint8_t>> parse(Source& in, const std::string& path) {
  std::vector<uint8_t> header(4);
  in.read(header.data(), 4, 0, "the magic number");
  if (header[0] != 0 || header[1] != 0 || header[2] != 0x08 || header[3] < 1 || header[3] > 4) {
    throw std::runtime_error(path + ": byte 0: not an unsigned-byte IDX file (magic " +
                             std::to_string(header[2]) + "/" + std::to_string(header[3]) + ")");
  }
  std::vector<int64_t> dims(header[3]);
  int64_t total = 1;
  for (size_t d = 0; d < dims.size(); ++d) {
    uint8_t b[4];
    in.read(b, 4, 4 + 4 * static_cast<int64_t>(d), "a dimension");
    header.insert(header.end(), b, b + 4);
    dims[d] = (int64_t{b[0]} << 24) | (int64_t{b[1]} << 16) | (int64_t{b[2]} << 8) | b[3];
    if (dims[d] <= 0 || dims[d] > (int64_t{1} << 28)) {
      throw std::runtime_error(path + ": byte " + std::to_string(4 + 4 * d) + ": bad dimension " +
                               std::to_string(dims[d]));
    }
    total *= dims[d];
    if (total > (int64_t{1} << 34)) throw std::runtime_error(path + ": dimensions too large");
  }
  at::Tensor out = in.data(dims, total, static_cast<int64_t>(header.size()));
  return {out, header};
}

}  // namespace

at::Tensor read_idx(const std::string& path) {
  const std::optional<DecodedCache> cache = DecodedCache::for_file(path);
  if (cache) {
    if (auto bytes = cache->read()) {
      try {
        CopySource copy(std::move(bytes));
        return parse(copy, path).first;
      } catch (const std::runtime_error&) {  // not the copy that was kept: decode again
      }
    }
  }
  FileSource file(path);
  auto [out, header] = parse(file, path);
  if (cache)
    cache->keep({{header.data(), header.size()},
                 {out.data_ptr<uint8_t>(), static_cast<size_t>(out.numel())}});
  return out;
}

}  // namespace dtrain::data
