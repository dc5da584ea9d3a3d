// Codecs: a tensor <-> a self-describing byte packet. No knowledge of ranks or transport.
//
// Packet = header (docs/wire-format.md) + table + payload. Encoding takes any floating
// tensor (float32, float64, float16, bfloat16; any shape, contiguous or not); values are
// coded as float32 and decode restores the original dtype and shape. NaN or Inf input
// throws std::invalid_argument. decode() validates every header field and length against
// the packet size and throws CorruptPacket on anything inconsistent; it never reads
// outside the packet.
//
// Names (codec_help() lists them from the codec table, codec_table.cpp):
//         none | fp16 | bf16 | uniform:B (1..16) | sortquant:Q:S (Q+S <= 16) |
//         sortquant:B (a 3:1 split of B bits: 16=12+4, 12=9+3, 8=6+2, 4=3+1) |
//         kmeans:B[:ITERS] (B 1..8; ITERS default: until assignments settle, at most 300)
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "dtrain/compress/packet_header.h"  // CorruptPacket

namespace dtrain::compress {

// A family's wire id: its row's place in the codec table. The families other code names
// have an enumerator; a family nothing names needs none.
enum class CodecId : uint8_t {
  kNone = 0,
  kFp16 = 1,
  kBf16 = 2,
  kUniform = 3,
  kSortQuant = 4,
  kKMeans = 5,
  kRotated = 6,
  kTile = 7
};

struct CodecSpec {
  CodecId id = CodecId::kNone;
  int bits = 32;       // bits per coded value on the wire (Q+S for sortquant)
  int split_bits = 0;  // sortquant: S (2^S groups)
  int iters = 0;       // kmeans: Lloyd iterations (0: until stable)
  // rot (a rotation before a value codec): the value codec's id, and log2 of the tile the
  // rotation mixes; bits, split_bits and iters are then the value codec's. 0 otherwise.
  CodecId inner = CodecId::kNone;
  int tile_log2 = 0;
};
bool operator==(const CodecSpec& a, const CodecSpec& b);
inline bool operator!=(const CodecSpec& a, const CodecSpec& b) {
  return !(a == b);
}

// The canonical name, parsed back by parse_codec ("sortquant:8" -> "sortquant:6:2").
std::string to_string(const CodecSpec& spec);

// Throws std::invalid_argument naming the problem, e.g. "uniform:0: bits must be 1..16".
CodecSpec parse_codec(const std::string& name);
// One line per codec family, for --help.
std::string codec_help();

using Packet = std::vector<uint8_t>;

// A codec's value coding on float32 arrays; the packet framing is shared (encode/decode).
class Codec {
 public:
  virtual ~Codec() = default;
  virtual const CodecSpec& spec() const = 0;
  // Exact table and payload sizes for n values; the decoder checks them.
  virtual size_t table_bytes(int64_t n) const = 0;
  virtual size_t payload_bytes(int64_t n) const = 0;
  // `x` holds n finite floats; writes exactly table_bytes(n) and payload_bytes(n) bytes,
  // using up to `threads` threads (>= 1) on large n; the bytes never depend on the count.
  virtual void encode_values(const float* x, int64_t n, uint8_t* table, uint8_t* payload,
                             int threads) const = 0;
  // Decoding as a lookup: the value of each of the 2^bits codes, from a table validated
  // as decode_values validates it (CorruptPacket). Empty for none/fp16/bf16, whose payload
  // is the values themselves. Lets any device decode with one gather.
  virtual std::vector<float> code_values(const uint8_t* /*table*/) const { return {}; }
  // Inverse; throws CorruptPacket on an invalid table (non-finite or negative step...).
  virtual void decode_values(const uint8_t* table, const uint8_t* payload, int64_t n, float* out,
                             int threads) const = 0;

  // Tensor-operation kernels (tensor_coding.h), how a tensor on another device (a GPU) is
  // coded where it lies. encode_tensor writes exactly the bytes encode_values writes for
  // the same values (1-D contiguous float32, n > 0, on any device); a family without it
  // (encodes_tensors() false) is staged through host memory. decode_tensor decodes n values
  // onto `device`, equal to decode_values; by default one gather from code_values.
  virtual bool encodes_tensors() const { return false; }
  virtual void encode_tensor(const at::Tensor& values, uint8_t* table, uint8_t* payload) const;
  virtual at::Tensor decode_tensor(const uint8_t* table, const uint8_t* payload, int64_t n,
                                   const c10::Device& device) const;
};

std::unique_ptr<Codec> make_codec(const CodecSpec& spec);
inline std::unique_ptr<Codec> make_codec(const std::string& name) {
  return make_codec(parse_codec(name));
}

// Threads: a tensor of at least 1M values (2M to decode) is coded on up to `threads`
// threads, at least 512K (1M) values each: the caller's and short-lived others
// (std::invalid_argument if threads < 1). Packets and decoded values are bit-identical for
// every thread count. none/fp16/bf16 copy through LibTorch, which uses its own intra-op
// threads (at::set_num_threads) instead; kmeans fits its centroids on one thread and
// assigns codes on `threads`.

// Any device's tensor: a CUDA tensor is coded on its GPU (tensor_coding.h; kmeans through
// host memory) and gives the same bytes as its CPU copy; `threads` applies on the CPU.
Packet encode(const Codec& codec, const at::Tensor& tensor, int threads = 1);
// The same packet written into `out`, which must hold exactly packet_size(codec, shape)
// bytes (std::invalid_argument otherwise): for callers that own the buffer (the pipeline
// leaves room after it for the wire check).
void encode_into(const Codec& codec, const at::Tensor& tensor, uint8_t* out, size_t out_size,
                 int threads = 1);
// The exact size of the packet encode() makes for a tensor of `shape` (header, table and
// payload), without coding: receivers size their buffers with it. Throws
// std::invalid_argument on a negative dimension or more than 8 of them.
size_t packet_size(const Codec& codec, const std::vector<int64_t>& shape);

// Decodes any packet: the codec and its parameters come from the header. The tensor is on
// the CPU unless a device is given; on another device it is decoded there from the copied
// payload (tensor_coding.h), with the CPU's values.
at::Tensor decode(const uint8_t* data, size_t size, int threads = 1,
                  const c10::Device& device = c10::Device(c10::kCPU));
inline at::Tensor decode(const Packet& packet, int threads = 1) {
  return decode(packet.data(), packet.size(), threads);
}
at::Tensor decode(const Packet& packet, const c10::Device& device);

// Header fields, for tools and tests (validated like decode does).
struct PacketInfo {
  CodecSpec spec;
  at::ScalarType dtype;
  std::vector<int64_t> shape;
  int64_t numel;
  size_t header_bytes, table_bytes, payload_bytes;
};
PacketInfo inspect(const uint8_t* data, size_t size);

// wire bytes / (4 * numel): the compression ratio (headers and tables counted).
double compression_ratio(size_t packet_bytes, int64_t numel);

}  // namespace dtrain::compress
