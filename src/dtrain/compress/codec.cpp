#include "dtrain/compress/codec.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "dtrain/compress/chunks.h"
#include "dtrain/compress/codec_family.h"
#include "dtrain/compress/codecs.h"
#include "dtrain/compress/tensor_coding.h"

namespace dtrain::compress {
namespace {

constexpr int kMaxDims = PacketHeader::kMaxDims;
constexpr int64_t kMaxNumel = int64_t{1} << 40;

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

const CodecFamily& family_of(const CodecSpec& spec) {
  const CodecFamily* family = find_codec_family(spec.id);
  if (family == nullptr)
    throw std::invalid_argument("unknown codec id " + std::to_string(static_cast<int>(spec.id)));
  return *family;
}

void check_spec(const CodecSpec& s, const std::string& name) {
  try {
    const CodecFamily& family = family_of(s);
    if (!family.wraps_a_codec && (s.inner != CodecId::kNone || s.tile_log2 != 0))
      throw std::invalid_argument("no inner codec or tile here");
    family.check(s);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument("codec '" + name + "': " + e.what());
  }
}

}  // namespace

std::string to_string(const CodecSpec& spec) {
  const CodecFamily* family = find_codec_family(spec.id);
  return family == nullptr ? "?" : family->name + family->parameters(spec);
}

bool operator==(const CodecSpec& a, const CodecSpec& b) {
  return a.id == b.id && a.bits == b.bits && a.split_bits == b.split_bits && a.iters == b.iters &&
         a.inner == b.inner && a.tile_log2 == b.tile_log2;
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
  const auto& families = codec_families();
  for (size_t id = 0; id < families.size(); ++id) {
    if (parts[0] != families[id]->name) continue;
    CodecSpec spec;
    try {
      spec = families[id]->parse({parts.begin() + 1, parts.end()});
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("codec '" + name + "': " + e.what());
    }
    spec.id = static_cast<CodecId>(id);
    check_spec(spec, name);
    return spec;
  }
  throw std::invalid_argument("unknown codec '" + name + "'\n" + codec_help());
}

std::string codec_help() {
  std::string help = "codecs:";
  for (const CodecFamily* family : codec_families()) {
    std::string usage = family->usage;
    usage.resize(std::max<size_t>(usage.size() + 1, 15), ' ');
    help += "\n  " + usage + family->help;
  }
  return help;
}

std::unique_ptr<Codec> make_codec(const CodecSpec& spec) {
  check_spec(spec, to_string(spec));
  return family_of(spec).make(spec);
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
  const bool on_device = !tensor.device().is_cpu() && codec.encodes_tensors();
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
  h.inner = static_cast<uint8_t>(codec.spec().inner);
  h.tile_log2 = static_cast<uint8_t>(codec.spec().tile_log2);
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
  if (find_codec_family(static_cast<CodecId>(h.codec_id)) == nullptr) {
    throw CorruptPacket("packet: unknown codec id " + std::to_string(h.codec_id));
  }
  info.spec.id = static_cast<CodecId>(h.codec_id);
  info.dtype = dtype_from_code(h.dtype_code);
  info.spec.bits = h.bits;
  info.spec.split_bits = h.split_bits;
  info.spec.inner = static_cast<CodecId>(h.inner);
  info.spec.tile_log2 = h.tile_log2;
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
    out = codec->decode_tensor(table, payload, info.numel, device);
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
