// CIFAR binary batches (data::read_cifar_batch): the first byte picks CIFAR-10 (even) or
// CIFAR-100 (odd), the rest is the file. Any file is whole records with labels in range,
// or a std::runtime_error.
#include <ATen/core/Tensor.h>

#include <cstdlib>

#include "dtrain/data/dataset.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool cifar100 = data[0] & 1;
  const std::string path =
      dtrain::fuzz::write_input("data_batch.bin", dtrain::fuzz::as_text(data + 1, size - 1));
  try {
    const auto [images, labels] = dtrain::data::read_cifar_batch(path, cifar100);
    const int64_t classes = cifar100 ? 100 : 10;
    if (images.size(0) != labels.size(0) || labels.min().item<int64_t>() < 0 ||
        labels.max().item<int64_t>() >= classes)
      std::abort();
  } catch (const std::runtime_error&) {
  }
  return 0;
}
