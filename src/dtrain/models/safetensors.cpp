#include "dtrain/models/safetensors.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cstring>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <vector>

namespace dtrain::models {
namespace {

struct DtypeName {
  const char* name;
  at::ScalarType type;
};

constexpr std::array<DtypeName, 10> kDtypes{{{"F64", at::kDouble},
                                             {"F32", at::kFloat},
                                             {"F16", at::kHalf},
                                             {"BF16", at::kBFloat16},
                                             {"I64", at::kLong},
                                             {"I32", at::kInt},
                                             {"I16", at::kShort},
                                             {"I8", at::kChar},
                                             {"U8", at::kByte},
                                             {"BOOL", at::kBool}}};

at::ScalarType parse_dtype(const std::string& name, const std::string& where) {
  for (const auto& d : kDtypes)
    if (name == d.name) return d.type;
  throw std::runtime_error(where + ": unsupported dtype '" + name + "'");
}

const char* dtype_name(at::ScalarType type) {
  for (const auto& d : kDtypes)
    if (type == d.type) return d.name;
  throw std::runtime_error(std::string("safetensors: cannot store dtype ") + c10::toString(type));
}

struct Entry {
  std::string name;
  at::ScalarType dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
};

// Where the bytes come from: a file read piece by piece (a model's weights need not be held
// twice) or bytes already in memory (a checkpoint shard, checked before it is parsed).
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  virtual uint64_t size() const = 0;
  // Reads n bytes at `offset` (within size()); false on a read error.
  virtual bool read(uint64_t offset, void* dst, uint64_t n) = 0;
};

class FileSource : public ByteSource {
 public:
  explicit FileSource(const std::string& path) : in_(path, std::ios::binary | std::ios::ate) {
    if (!in_) throw std::runtime_error("cannot open " + path);
    size_ = static_cast<uint64_t>(in_.tellg());
  }
  uint64_t size() const override { return size_; }
  bool read(uint64_t offset, void* dst, uint64_t n) override {
    in_.seekg(static_cast<std::streamoff>(offset));
    in_.read(static_cast<char*>(dst), static_cast<std::streamsize>(n));
    return static_cast<bool>(in_);
  }

 private:
  std::ifstream in_;
  uint64_t size_ = 0;
};

class MemorySource : public ByteSource {
 public:
  MemorySource(const char* data, uint64_t size) : data_(data), size_(size) {}
  uint64_t size() const override { return size_; }
  bool read(uint64_t offset, void* dst, uint64_t n) override {
    if (n > 0) std::memcpy(dst, data_ + offset, n);
    return true;
  }

 private:
  const char* data_;
  uint64_t size_;
};

uint64_t read_header_length(ByteSource& in, const std::string& path) {
  const uint64_t file_size = in.size();
  if (file_size < 8)
    throw std::runtime_error(path + ": " + std::to_string(file_size) +
                             " bytes, too short for a safetensors header length (8 bytes)");
  std::array<unsigned char, 8> bytes{};
  if (!in.read(0, bytes.data(), 8)) throw std::runtime_error(path + ": cannot read the header");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i)
    n = (n << 8) | bytes[static_cast<size_t>(i)];
  if (n > kMaxSafetensorsHeader)
    throw std::runtime_error(path + ": header length " + std::to_string(n) + " exceeds the " +
                             std::to_string(kMaxSafetensorsHeader) + "-byte limit");
  if (n > file_size - 8)
    throw std::runtime_error(path + ": header length " + std::to_string(n) +
                             " runs past the end of the file (" + std::to_string(file_size) +
                             " bytes)");
  return n;
}

// Element count of `shape`, or throws when a dimension is negative or the product overflows.
uint64_t element_count(const std::vector<int64_t>& shape, const std::string& where) {
  uint64_t n = 1;
  for (const int64_t d : shape) {
    if (d < 0) throw std::runtime_error(where + ": negative dimension in shape");
    if (d != 0 && n > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(d))
      throw std::runtime_error(where + ": shape's element count overflows");
    n *= static_cast<uint64_t>(d);
  }
  return n;
}

Entry parse_entry(const std::string& name, const nlohmann::json& j, const std::string& path) {
  const std::string where = path + ": tensor '" + name + "'";
  if (!j.is_object()) throw std::runtime_error(where + ": entry is not an object");
  for (const char* field : {"dtype", "shape", "data_offsets"})
    if (!j.contains(field)) throw std::runtime_error(where + ": missing \"" + field + "\"");
  Entry e;
  e.name = name;
  if (!j["dtype"].is_string()) throw std::runtime_error(where + ": dtype is not a string");
  e.dtype = parse_dtype(j["dtype"].get<std::string>(), where);
  const auto& shape = j["shape"];
  if (!shape.is_array()) throw std::runtime_error(where + ": shape is not an array");
  for (const auto& d : shape) {
    if (!d.is_number_integer()) throw std::runtime_error(where + ": shape holds a non-integer");
    e.shape.push_back(d.get<int64_t>());
  }
  const auto& offsets = j["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned())
    throw std::runtime_error(where + ": data_offsets must be two non-negative integers");
  e.begin = offsets[0].get<uint64_t>();
  e.end = offsets[1].get<uint64_t>();
  if (e.end < e.begin) throw std::runtime_error(where + ": data_offsets end before they begin");
  const uint64_t elements = element_count(e.shape, where);
  const auto item = static_cast<uint64_t>(c10::elementSize(e.dtype));
  if (elements > std::numeric_limits<uint64_t>::max() / item || elements * item != e.end - e.begin)
    throw std::runtime_error(where + ": data_offsets span " + std::to_string(e.end - e.begin) +
                             " bytes but its dtype and shape need " +
                             std::to_string(elements * item));
  return e;
}

// The entries must tile [0, buffer) exactly: sorted by offset, each begins where the last ended.
void check_tiling(std::vector<Entry>& entries, uint64_t buffer, const std::string& path) {
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t at = 0;
  for (const Entry& e : entries) {
    if (e.begin != at)
      throw std::runtime_error(path + ": tensor '" + e.name + "' starts at byte " +
                               std::to_string(e.begin) + " of the data, expected " +
                               std::to_string(at) + (e.begin < at ? " (overlap)" : " (a hole)"));
    at = e.end;
  }
  if (at != buffer)
    throw std::runtime_error(path + ": the tensors cover " + std::to_string(at) + " of the " +
                             std::to_string(buffer) + " data bytes after the header");
}

SafetensorsFile parse(ByteSource& in, const std::string& path) {
  const uint64_t header_length = read_header_length(in, path);
  std::string header(header_length, '\0');
  if (!in.read(8, header.data(), header_length))
    throw std::runtime_error(path + ": cannot read the header");
  const nlohmann::json j = nlohmann::json::parse(header, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    throw std::runtime_error(path + ": the header is not a JSON object");
  SafetensorsFile out;
  std::vector<Entry> entries;
  for (const auto& [name, value] : j.items()) {
    if (name == "__metadata__") {
      if (!value.is_object()) throw std::runtime_error(path + ": __metadata__ is not an object");
      for (const auto& [k, v] : value.items()) {
        if (!v.is_string())
          throw std::runtime_error(path + ": __metadata__ value '" + k + "' is not a string");
        out.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    entries.push_back(parse_entry(name, value, path));
  }
  const uint64_t data_start = 8 + header_length;
  check_tiling(entries, in.size() - data_start, path);
  for (const Entry& e : entries) {
    at::Tensor t = at::empty(e.shape, at::TensorOptions().dtype(e.dtype));
    if (!in.read(data_start + e.begin, t.data_ptr(), e.end - e.begin))
      throw std::runtime_error(path + ": cannot read tensor '" + e.name + "'");
    out.tensors[e.name] = std::move(t);
  }
  return out;
}

}  // namespace

SafetensorsFile read_safetensors(const std::string& path) {
  FileSource in(path);
  return parse(in, path);
}

SafetensorsFile parse_safetensors(const char* data, size_t size, const std::string& where) {
  MemorySource in(data, size);
  return parse(in, where);
}

std::string safetensors_bytes(const std::map<std::string, at::Tensor>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<at::Tensor> data;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    const at::Tensor t = tensor.detach().to(at::kCPU).contiguous();
    const auto bytes = static_cast<uint64_t>(t.numel()) * t.element_size();
    header[name] = {{"dtype", dtype_name(t.scalar_type())},
                    {"shape", t.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    data.push_back(t);
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keeps the buffer 8-byte aligned
  std::string out;
  out.reserve(8 + text.size() + offset);
  for (size_t i = 0; i < 8; ++i)
    out.push_back(static_cast<char>((static_cast<uint64_t>(text.size()) >> (8 * i)) & 0xff));
  out += text;
  for (const at::Tensor& t : data)
    out.append(static_cast<const char*>(t.data_ptr()),
               static_cast<size_t>(static_cast<uint64_t>(t.numel()) * t.element_size()));
  return out;
}

void write_safetensors(const std::string& path, const std::map<std::string, at::Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  const std::string bytes = safetensors_bytes(tensors, metadata);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw std::runtime_error("cannot write " + path);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out.flush()) throw std::runtime_error("cannot write " + path + " (disk full?)");
}

}  // namespace dtrain::models
