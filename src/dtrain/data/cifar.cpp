// CIFAR-10/100 binary versions (https://www.cs.toronto.edu/~kriz/cifar.html).
#include <ATen/ATen.h>

#include <cstring>
#include <fstream>
#include <stdexcept>

#include "dtrain/data/dataset.h"

namespace dtrain::data {

std::pair<at::Tensor, at::Tensor> read_cifar_batch(const std::string& path, bool cifar100) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw std::runtime_error(path + ": cannot open");
  const int64_t size = static_cast<int64_t>(in.tellg());
  const int64_t label_bytes = cifar100 ? 2 : 1;
  const int64_t record = label_bytes + 3072;
  if (size == 0 || size % record != 0) {
    throw std::runtime_error(path + ": byte " + std::to_string(size - size % record) +
                             ": truncated record (file size " + std::to_string(size) +
                             " is not a multiple of " + std::to_string(record) + ")");
  }
  const int64_t n = size / record;
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  in.seekg(0);
  if (!in.read(reinterpret_cast<char*>(bytes.data()), size)) {
    throw std::runtime_error(path + ": read failed");
  }
  at::Tensor images = at::empty({n, 3, 32, 32}, at::kByte);
  at::Tensor labels = at::empty({n}, at::kLong);
  const int64_t classes = cifar100 ? 100 : 10;
  uint8_t* pixels = images.data_ptr<uint8_t>();
  int64_t* label_out = labels.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* r = bytes.data() + i * record;
    const int64_t label = r[label_bytes - 1];  // cifar100: the fine label
    if (label >= classes || (cifar100 && r[0] >= 20)) {
      throw std::runtime_error(path + ": byte " + std::to_string(i * record) + ": label " +
                               std::to_string(label) + " out of range for " +
                               (cifar100 ? "cifar100" : "cifar10"));
    }
    label_out[i] = label;
    std::memcpy(pixels + i * 3072, r + label_bytes, 3072);
  }
  return {images, labels};
}

}  // namespace dtrain::data
