// uniform:B — one (min, step) for the whole tensor, 2^B levels including both ends.
// Error per element <= step / 2.
#include <ATen/ATen.h>

#include <cmath>
#include <utility>
#include <vector>

#include "dtrain/compress/bitpack.h"
#include "dtrain/compress/chunks.h"
#include "dtrain/compress/codec_family.h"
#include "dtrain/compress/codecs.h"
#include "dtrain/compress/tensor_kernels.h"

namespace dtrain::compress {
namespace {

class UniformCodec final : public Codec {
 public:
  explicit UniformCodec(const CodecSpec& spec) : spec_(spec) {}
  const CodecSpec& spec() const override { return spec_; }
  size_t table_bytes(int64_t) const override { return 8; }
  size_t payload_bytes(int64_t n) const override { return packed_bytes(n, spec_.bits); }

  void encode_values(const float* x, int64_t n, uint8_t* table, uint8_t* payload,
                     int threads) const override {
    const int chunks = chunk_count(n, threads, kMinEncodeChunk);
    const ValueRange range = finite_range(x, n, chunks);
    const int max_level = (1 << spec_.bits) - 1;
    const float step = level_step(range.lo, range.hi, max_level + 1);
    put_f32(table, range.lo);
    put_f32(table + 4, step);
    for_each_block(n, chunks, [&](int64_t start, int64_t count) {
      uint16_t codes[kCodeBlock];
      quantize_grouped(x + start, count, nullptr, 0, &range.lo, &step, 0, max_level, codes);
      pack_bits(codes, count, spec_.bits, payload, start);
    });
  }

  std::vector<float> code_values(const uint8_t* table) const override {
    const auto [lo, step] = read_table(table);
    std::vector<float> value(size_t{1} << spec_.bits);
    for (size_t level = 0; level < value.size(); ++level)
      value[level] = dequantize(static_cast<uint16_t>(level), lo, step);
    return value;
  }

  void decode_values(const uint8_t* table, const uint8_t* payload, int64_t n, float* out,
                     int threads) const override {
    const std::pair<float, float> lo_step = read_table(table);
    const float lo = lo_step.first, step = lo_step.second;
    for_each_block(n, chunk_count(n, threads, kMinDecodeChunk), [&](int64_t start, int64_t count) {
      uint16_t codes[kCodeBlock];
      unpack_bits(payload, count, spec_.bits, codes, start);
      for (int64_t i = 0; i < count; ++i)
        out[start + i] = dequantize(codes[i], lo, step);
    });
  }

  bool encodes_tensors() const override { return true; }

  void encode_tensor(const at::Tensor& values, uint8_t* table, uint8_t* payload) const override {
    const KeyRange range = finite_key_range(values);
    const int max_level = (1 << spec_.bits) - 1;
    const float step = level_step(range.lo, range.hi, max_level + 1);
    put_f32(table, range.lo);
    put_f32(table + 4, step);
    const auto scalar = [&](float v) { return at::full({}, v, values.options()); };
    copy_to_host(
        pack_codes(quantize_levels(values, scalar(range.lo), scalar(step), max_level), spec_.bits),
        payload);
  }

 private:
  static std::pair<float, float> read_table(const uint8_t* table) {
    const float lo = get_f32(table), step = get_f32(table + 4);
    if (!std::isfinite(lo) || !std::isfinite(step) || step < 0.f) {
      throw CorruptPacket("uniform packet: invalid (min, step) table");
    }
    return {lo, step};
  }

  CodecSpec spec_;
};

void check_uniform(const CodecSpec& spec) {
  if (spec.bits < 1 || spec.bits > 16) throw std::invalid_argument("bits must be 1..16");
}

std::unique_ptr<Codec> make_uniform(const CodecSpec& spec) {
  return std::make_unique<UniformCodec>(spec);
}

}  // namespace

extern const CodecFamily kUniformCodecFamily{
    "uniform",
    "uniform:B",
    "B-bit uniform quantization between the tensor's min and max (B 1..16)",
    "uniform:8",
    parse_bits_parameter,
    check_uniform,
    bits_parameter,
    make_uniform};

}  // namespace dtrain::compress
