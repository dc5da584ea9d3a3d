// IDX files, gzipped or plain (data::read_idx): any file is a tensor of exactly its
// declared dimensions or a std::runtime_error. Decoded copies of gzipped inputs are kept in
// the scratch directory, and read back where an input repeats.
#include <ATen/core/Tensor.h>

#include <cstdlib>

#include "dtrain/data/dataset.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool cache_here =
      setenv("DTRAIN_CACHE_DIR", (dtrain::fuzz::scratch_dir() + "/cache").c_str(), 1) == 0;
  (void)cache_here;
  const std::string path =
      dtrain::fuzz::write_input("input.idx", dtrain::fuzz::as_text(data, size));
  try {
    const at::Tensor t = dtrain::data::read_idx(path);
    if (t.scalar_type() != at::kByte || t.dim() < 1 || t.dim() > 4) std::abort();
  } catch (const std::runtime_error&) {
  }
  return 0;
}
