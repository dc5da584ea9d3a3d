// safetensors files (models::read_safetensors): any file is a set of tensors that tile its
// buffer or a std::runtime_error.
#include <ATen/core/Tensor.h>

#include <cstdlib>

#include "dtrain/models/safetensors.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path =
      dtrain::fuzz::write_input("model.safetensors", dtrain::fuzz::as_text(data, size));
  try {
    const auto file = dtrain::models::read_safetensors(path);
    size_t bytes = 0;
    for (const auto& [name, t] : file.tensors)
      bytes += static_cast<size_t>(t.numel()) * t.element_size();
    if (bytes > size) std::abort();  // tensors are read from the file's own bytes
  } catch (const std::runtime_error&) {
  }
  return 0;
}
