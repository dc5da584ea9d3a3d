// The safetensors file format (Hugging Face's weights files), read and written:
//
//   8 bytes   N, the header's length, unsigned little-endian
//   N bytes   a JSON object: for each tensor name {"dtype": "F32", "shape": [..],
//             "data_offsets": [begin, end]}, and optionally "__metadata__" (strings)
//   the rest  the byte buffer: each tensor's bytes, little-endian, row-major, at
//             [begin, end) counted from the buffer's start
//
// The reader trusts nothing in the file: every length, offset, dtype and shape is checked
// against the file's size and against the others (the buffer must be covered exactly, no
// holes and no overlaps, as the format's specification requires) before any tensor is
// read, and a violation is a std::runtime_error naming the file and what is wrong.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <string>

namespace dtrain::models {

struct SafetensorsFile {
  std::map<std::string, at::Tensor> tensors;  // in their stored dtype, on the CPU
  std::map<std::string, std::string> metadata;
};

// Headers above this size are refused (the reference implementation's limit).
constexpr uint64_t kMaxSafetensorsHeader = 100ull << 20;

SafetensorsFile read_safetensors(const std::string& path);
// The same from bytes in memory; `where` names them in errors.
SafetensorsFile parse_safetensors(const char* data, size_t size, const std::string& where);

// Writes contiguous CPU copies of `tensors` (dtypes: F64, F32, F16, BF16, I64, I32, I16, I8,
// U8, BOOL) in name order. Throws std::runtime_error when the file cannot be written.
void write_safetensors(const std::string& path, const std::map<std::string, at::Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});
// The file's bytes, in memory (for writers that commit files their own way).
std::string safetensors_bytes(const std::map<std::string, at::Tensor>& tensors,
                              const std::map<std::string, std::string>& metadata = {});

}  // namespace dtrain::models
