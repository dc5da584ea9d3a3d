// IDX files (http://yann.lecun.com/exdb/mnist/): 2 zero bytes, a type byte (0x08 unsigned
// byte), a dimension count, big-endian uint32 dimensions, then the data. zlib reads gzipped
// and plain files alike.
#include <ATen/ATen.h>
#include <zlib.h>

#include <memory>
#include <stdexcept>

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
  at::Tensor out = at::empty(dims, at::kByte);
  const int64_t header = 4 + 4 * static_cast<int64_t>(dims.size());
  read_exact(f.get(), out.data_ptr<uint8_t>(), static_cast<size_t>(total), path, header,
             "the data");
  char extra;
  if (gzread(f.get(), &extra, 1) > 0) {
    throw std::runtime_error(path + ": byte " + std::to_string(header + total) +
                             ": unexpected data after the last item");
  }
  return out;
}

}  // namespace dtrain::data
