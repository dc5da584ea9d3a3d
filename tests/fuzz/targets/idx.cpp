// IDX files, gzipped or plain (data::read_idx): any file is a tensor of exactly its
// declared dimensions or a std::runtime_error.
#include <ATen/core/Tensor.h>

#include <cstdlib>

#include "dtrain/data/dataset.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path =
      dtrain::fuzz::write_input("input.idx", dtrain::fuzz::as_text(data, size));
  try {
    const at::Tensor t = dtrain::data::read_idx(path);
    if (t.scalar_type() != at::kByte || t.dim() < 1 || t.dim() > 4) std::abort();
  } catch (const std::runtime_error&) {
  }
  return 0;
}
