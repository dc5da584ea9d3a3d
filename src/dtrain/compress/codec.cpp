#include "dtrain/compress/codec.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "dtrain/base/parse.h"
#include "dtrain/compress/chunks.h"
#include "dtrain/compress/codecs.h"
#include "dtrain/compress/tensor_coding.h"

namespace dtrain::compress {
namespace {

constexpr int kMaxDims = PacketHeader::kMaxDims;
constexpr int64_t kMaxNumel = int64_t{1} << 40;

int parse_int(const std::string& text, const std::string& whole) {
  const auto v = parse_integer(text, -1'000'000, 1'000'000);
  if (!v) throw std::invalid_argument("codec '" + whole + "': '" + text + "' is not an integer");
  return static_cast<int>(*v);
}

uint8_t dtype_code(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return 0;
    case at::kDouble:
      return 1;
    case at::kHalf:
      return 2;
    case at::kBFloat16:
      return 3;
    default:
      throw std::invalid_argument("codecs take floating tensors (float32/64, float16, bfloat16)");
  }
}

at::ScalarType dtype_from_code(uint8_t c) {
  switch (c) {
    case 0:
      return at::kFloat;
    case 1:
      return at::kDouble;
    case 2:
      return at::kHalf;
    case 3:
      return at::kBFloat16;
    default:
      throw CorruptPacket("packet: unknown dtype code " + std::to_string(c));
  }
}

void check_spec(const CodecSpec& s, const std::string& name) {
  auto fail = [&](const std::string& why) {
    throw std::invalid_argument("codec '" + name + "': " + why);
  };
  switch (s.id) {
    case CodecId::kNone:
      if (s.bits != 32) fail("none has 32 bits");
      break;
    case CodecId::kFp16:
    case CodecId::kBf16:
      if (s.bits != 16) fail("16-bit float has 16 bits");
      break;
    case CodecId::kUniform:
      if (s.bits < 1 || s.bits > 16) fail("bits must be 1..16");
      break;
    case CodecId::kSortQuant:
      if (s.split_bits < 0 || s.bits - s.split_bits < 1 || s.bits > 16) {
        fail("need Q >= 1 level bits, S >= 0 split bits, Q+S <= 16");
      }
      break;
    case CodecId::kKMeans:
      if (s.bits < 1 || s.bits > 8) fail("bits must be 1..8 (at most 256 centroids)");
      if (s.iters < 0 || s.iters > 100000) fail("iterations must be 0..100000");
      break;
  }
}

}  // namespace

std::string to_string(const CodecSpec& spec) {
  switch (spec.id) {
    case CodecId::kNone:
      return "none";
    case CodecId::kFp16:
      return "fp16";
    case CodecId::kBf16:
      return "bf16";
    case CodecId::kUniform:
      return "uniform:" + std::to_string(spec.bits);
    case CodecId::kSortQuant:
      return "sortquant:" + std::to_string(spec.bits - spec.split_bits) + ":" +
             std::to_string(spec.split_bits);
    case CodecId::kKMeans:
      return "kmeans:" + std::to_string(spec.bits) +
             (spec.iters > 0 ? ":" + std::to_string(spec.iters) : "");
  }
  return "?";
}

bool operator==(const CodecSpec& a, const CodecSpec& b) {
  return a.id == b.id && a.bits == b.bits && a.split_bits == b.split_bits && a.iters == b.iters;
}

CodecSpec parse_codec(const std::string& name) {
  std::vector<std::string> parts;
  for (size_t start = 0;;) {
    const size_t colon = name.find(':', start);
    parts.push_back(
        name.substr(start, colon == std::string::npos ? std::string::npos : colon - start));
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  const std::string& family = parts[0];
  CodecSpec s;
  auto arity = [&](size_t lo, size_t hi) {
    if (parts.size() < lo || parts.size() > hi) {
      throw std::invalid_argument("codec '" + name + "': wrong number of ':' parameters");
    }
  };
  if (family == "none") {
    arity(1, 1);
  } else if (family == "fp16" || family == "bf16") {
    arity(1, 1);
    s.id = family == "fp16" ? CodecId::kFp16 : CodecId::kBf16;
    s.bits = 16;
  } else if (family == "uniform") {
    arity(2, 2);
    s.id = CodecId::kUniform;
    s.bits = parse_int(parts[1], name);
  } else if (family == "sortquant") {
    arity(2, 3);
    s.id = CodecId::kSortQuant;
    if (parts.size() == 3) {
      const int q = parse_int(parts[1], name);
      s.split_bits = parse_int(parts[2], name);
      s.bits = q + s.split_bits;
    } else {
      const int b = parse_int(parts[1], name);
      if (b < 2 || b > 16 || b % 4 != 0) {
        throw std::invalid_argument("codec '" + name +
                                    "': the 3:1 shorthand takes 4, 8, 12 or 16 bits; use "
                                    "sortquant:Q:S otherwise");
      }
      s.bits = b;
      s.split_bits = b / 4;
    }
  } else if (family == "kmeans") {
    arity(2, 3);
    s.id = CodecId::kKMeans;
    s.bits = parse_int(parts[1], name);
    if (parts.size() == 3) {
      s.iters = parse_int(parts[2], name);
      if (s.iters < 1) throw std::invalid_argument("codec '" + name + "': iterations must be >= 1");
    }
  } else {
    throw std::invalid_argument("unknown codec '" + name + "'\n" + codec_help());
  }
  check_spec(s, name);
  return s;
}

std::string codec_help() {
  return "codecs:\n"
         "  none           raw float32\n"
         "  fp16, bf16     16-bit floats\n"
         "  uniform:B      B-bit uniform quantization between the tensor's min and max (B 1..16)\n"
         "  sortquant:Q:S  sort quantization: 2^S equal-count groups by rank, 2^Q levels each\n"
         "  sortquant:B    the seeds' 3:1 split (16=12+4, 12=9+3, 8=6+2, 4=3+1)\n"
         "  kmeans:B[:I]   1-D k-means with 2^B centroids (B 1..8), I Lloyd iterations";
}

std::unique_ptr<Codec> make_codec(const CodecSpec& spec) {
  check_spec(spec, to_string(spec));
  switch (spec.id) {
    case CodecId::kNone:
    case CodecId::kFp16:
    case CodecId::kBf16:
      return make_cast_codec(spec);
    case CodecId::kUniform:
      return make_uniform_codec(spec);
    case CodecId::kSortQuant:
      return make_sortquant_codec(spec);
    case CodecId::kKMeans:
      return make_kmeans_codec(spec);
  }
  throw std::invalid_argument("unknown codec id");
}

void encode_into(const Codec& codec, const at::Tensor& tensor, uint8_t* out, size_t out_size,
                 int threads) {
  if (tensor.dim() > kMaxDims) {
    throw std::invalid_argument("a packet holds at most " + std::to_string(kMaxDims) +
                                " dimensions");
  }
  require_threads(threads);  // before any work: none/fp16/bf16 take no thread count
  const uint8_t dtype = dtype_code(tensor.scalar_type());
  // A GPU tensor is coded on its GPU with tensor operations, bit-identical to the CPU
  // kernels (tensor_coding.h); kmeans stages it through host memory instead.
  const bool on_device = !tensor.device().is_cpu() && encodes_with_tensor_ops(codec.spec());
  const at::Tensor values = on_device ? tensor.to(at::kFloat).contiguous().view({-1})
                                      : tensor.to(at::kFloat).to(at::kCPU).contiguous();
  const int64_t n = values.numel();
  const size_t table = codec.table_bytes(n);
  const size_t payload = codec.payload_bytes(n);
  PacketHeader h;
  h.codec_id = static_cast<uint8_t>(codec.spec().id);
  h.dtype_code = dtype;
  h.bits = static_cast<uint8_t>(codec.spec().bits);
  h.split_bits = static_cast<uint8_t>(codec.spec().split_bits);
  h.table_bytes = static_cast<uint32_t>(table);
  h.payload_bytes = payload;
  h.numel = static_cast<uint64_t>(n);
  h.shape = tensor.sizes().vec();
  const size_t header = h.size();
  if (out_size != header + table + payload) {
    throw std::invalid_argument("encode: the packet is " +
                                std::to_string(header + table + payload) + " bytes, the buffer " +
                                std::to_string(out_size));
  }
  h.write(out);
  try {  // both check finiteness themselves
    if (on_device) {
      encode_with_tensor_ops(codec, values, out + header, out + header + table);
    } else {
      codec.encode_values(values.data_ptr<float>(), n, out + header, out + header + table, threads);
    }
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(to_string(codec.spec()) + " " + e.what());
  }
}

Packet encode(const Codec& codec, const at::Tensor& tensor, int threads) {
  Packet out(packet_size(codec, tensor.sizes().vec()));
  encode_into(codec, tensor, out.data(), out.size(), threads);
  return out;
}

size_t packet_size(const Codec& codec, const std::vector<int64_t>& shape) {
  if (shape.size() > static_cast<size_t>(kMaxDims)) {
    throw std::invalid_argument("a packet holds at most " + std::to_string(kMaxDims) +
                                " dimensions");
  }
  int64_t n = 1;
  for (const int64_t d : shape) {
    if (d < 0) throw std::invalid_argument("packet_size: negative dimension");
    n *= d;
  }
  PacketHeader header;
  header.shape = shape;
  return header.size() + codec.table_bytes(n) + codec.payload_bytes(n);
}

PacketInfo inspect(const uint8_t* data, size_t size) {
  const PacketHeader h = PacketHeader::read(data, size);
  PacketInfo info{};
  if (h.codec_id > static_cast<uint8_t>(CodecId::kKMeans)) {
    throw CorruptPacket("packet: unknown codec id " + std::to_string(h.codec_id));
  }
  info.spec.id = static_cast<CodecId>(h.codec_id);
  info.dtype = dtype_from_code(h.dtype_code);
  info.spec.bits = h.bits;
  info.spec.split_bits = h.split_bits;
  try {
    check_spec(info.spec, to_string(info.spec));
  } catch (const std::invalid_argument& e) {
    throw CorruptPacket(std::string("packet: bad codec parameters: ") + e.what());
  }
  info.header_bytes = h.size();
  const uint64_t numel = h.numel;
  // The non-zero dimensions' product is bounded too: with a zero among them a shape holds
  // no values, but its strides (that product) must still fit in an int64.
  int64_t product = 1, strides = 1;
  for (const int64_t dim : h.shape) {
    if (dim < 0 || dim > kMaxNumel)
      throw CorruptPacket("packet: bad dimension " + std::to_string(dim));
    if (dim != 0 && dim > kMaxNumel / strides) throw CorruptPacket("packet: shape too large");
    strides *= std::max<int64_t>(dim, 1);
    product *= dim;
    info.shape.push_back(dim);
  }
  if (static_cast<uint64_t>(product) != numel) {
    throw CorruptPacket("packet: shape holds " + std::to_string(product) + " values, header says " +
                        std::to_string(numel));
  }
  info.numel = product;
  const auto codec = make_codec(info.spec);
  info.table_bytes = h.table_bytes;
  info.payload_bytes = h.payload_bytes;
  if (info.table_bytes != codec->table_bytes(product) ||
      info.payload_bytes != codec->payload_bytes(product)) {
    throw CorruptPacket("packet: table/payload lengths do not match " + to_string(info.spec) +
                        " for " + std::to_string(product) + " values");
  }
  if (size != info.header_bytes + info.table_bytes + info.payload_bytes) {
    throw CorruptPacket("packet: " + std::to_string(size) + " bytes, expected " +
                        std::to_string(info.header_bytes + info.table_bytes + info.payload_bytes) +
                        " (truncated or trailing data)");
  }
  return info;
}

at::Tensor decode(const uint8_t* data, size_t size, int threads, const c10::Device& device) {
  require_threads(threads);
  const PacketInfo info = inspect(data, size);
  const auto codec = make_codec(info.spec);
  const uint8_t* table = data + info.header_bytes;
  const uint8_t* payload = table + info.table_bytes;
  at::Tensor out;
  if (device.is_cpu()) {
    out = at::empty({info.numel}, at::kFloat);
    codec->decode_values(table, payload, info.numel, out.data_ptr<float>(), threads);
  } else {
    out = decode_with_tensor_ops(*codec, table, payload, info.numel, device);
  }
  return out.view(info.shape).to(info.dtype);
}

double compression_ratio(size_t packet_bytes, int64_t numel) {
  return numel == 0 ? 0.0 : static_cast<double>(packet_bytes) / (4.0 * static_cast<double>(numel));
}

at::Tensor decode(const Packet& packet, const c10::Device& device) {
  return decode(packet.data(), packet.size(), 1, device);
}

}  // namespace dtrain::compress
