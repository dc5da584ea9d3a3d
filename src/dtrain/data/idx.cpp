// IDX files (http://yann.lecun.com/exdb/mnist/): 2 zero bytes, a type byte (0x08 unsigned
// byte), a dimension count, big-endian uint32 dimensions, then the data. zlib reads gzipped
// and plain files alike.
#include <ATen/ATen.h>
#include <zlib.h>

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <vector>

#include "dtrain/data/dataset.h"

namespace dtrain::data {
namespace {

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};

void read_exact(gzFile f, void* dst, size_t n, const std::string& path, int64_t offset,
                const char* what) {
  size_t done = 0;
  while (done < n) {
    const unsigned chunk = static_cast<unsigned>(std::min<size_t>(n - done, 1u << 30));
    const int got = gzread(f, static_cast<char*>(dst) + done, chunk);
    if (got <= 0) {
      int err = 0;
      const char* msg = gzerror(f, &err);
      throw std::runtime_error(path + ": truncated or unreadable at byte " +
                               std::to_string(offset + static_cast<int64_t>(done)) + " (reading " +
                               what + (err < 0 ? std::string(": ") + msg : std::string()) + ")");
    }
    done += static_cast<size_t>(got);
  }
}

}  // namespace

at::Tensor read_idx(const std::string& path) {
  std::unique_ptr<gzFile_s, GzCloser> f(gzopen(path.c_str(), "rb"));
  if (!f) throw std::runtime_error(path + ": cannot open");
  unsigned char magic[4];
  read_exact(f.get(), magic, 4, path, 0, "the magic number");
  if (magic[0] != 0 || magic[1] != 0 || magic[2] != 0x08 || magic[3] < 1 || magic[3] > 4) {
    throw std::runtime_error(path + ": byte 0: not an unsigned-byte IDX file (magic " +
                             std::to_string(magic[2]) + "/" + std::to_string(magic[3]) + ")");
  }
  std::vector<int64_t> dims(magic[3]);
  int64_t total = 1;
  for (size_t d = 0; d < dims.size(); ++d) {
    unsigned char b[4];
    read_exact(f.get(), b, 4, path, 4 + 4 * static_cast<int64_t>(d), "a dimension");
    dims[d] = (int64_t{b[0]} << 24) | (int64_t{b[1]} << 16) | (int64_t{b[2]} << 8) | b[3];
    if (dims[d] <= 0 || dims[d] > (int64_t{1} << 28)) {
      throw std::runtime_error(path + ": byte " + std::to_string(4 + 4 * d) + ": bad dimension " +
                               std::to_string(dims[d]));
    }
    total *= dims[d];
    if (total > (int64_t{1} << 34)) throw std::runtime_error(path + ": dimensions too large");
  }
  // The data is read in pieces and the tensor made once it all arrived: a corrupt header
  // declaring gigabytes costs an error at the end of a short file, not that allocation.
  const int64_t header = 4 + 4 * static_cast<int64_t>(dims.size());
  std::vector<uint8_t> data;
  while (data.size() < static_cast<size_t>(total)) {
    const size_t done = data.size();  // each piece as large as what arrived before it
    data.resize(done +
                std::min(std::max<size_t>(done, 64 << 10), static_cast<size_t>(total) - done));
    read_exact(f.get(), data.data() + done, data.size() - done, path,
               header + static_cast<int64_t>(done), "the data");
  }
  // The tensor takes over the bytes read (no copy: the images of Fashion-MNIST are 47 MB).
  auto owned = std::make_shared<std::vector<uint8_t>>(std::move(data));
  at::Tensor out = at::from_blob(
      owned->data(), dims, [owned](void*) {}, at::TensorOptions(at::kByte));
  char extra;
  if (gzread(f.get(), &extra, 1) > 0) {
    throw std::runtime_error(path + ": byte " + std::to_string(header + total) +
                             ": unexpected data after the last item");
  }
  return out;
}

}  // namespace dtrain::data
