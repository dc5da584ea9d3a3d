// tile:B — B-bit symmetric uniform levels per tile of 256 values, each tile's range set by
// its largest magnitude m: levels span [-c_B m, c_B m], values beyond are clamped. Meant
// for rotated values (rot:tile:B): after a Hadamard rotation a tile's values are close to
// Gaussian, and c_B is the clipping ratio that minimizes the mean squared error of Gaussian
// tiles of 256 (measured: docs/results.md, "Codecs"); it lands within 4 % of the
// Lloyd-Max bound at 2-4 bits. The per-tile range is TAH-Quant's tile-wise scaling; the max
// (not a variance) is what sets it because a max is exact on every device, so a GPU's
// packets are the CPU's bytes.
//
// Table: m of every tile (float32; ceil(n / 256) of them, the last tile possibly short).
// Payload: n codes of B bits. Decode: step = k_B m, lo = -(step h_B), value = lo + code step,
// with k_B = float(2 c_B / (2^B - 1)) and h_B = (2^B - 1) / 2, all in float32.
#include <ATen/ATen.h>

#include <cmath>

#include "dtrain/compress/bitpack.h"
#include "dtrain/compress/chunks.h"
#include "dtrain/compress/codec_family.h"
#include "dtrain/compress/codecs.h"
#include "dtrain/compress/tensor_kernels.h"

namespace dtrain::compress {
namespace {

constexpr int64_t kTile = 256;
static_assert(kCodeBlock % kTile == 0, "a code block holds whole tiles");

// The MSE-optimal clipping ratio per width for Gaussian tiles of 256 (1..8 bits).
constexpr float kClip[9] = {0.f, 0.26f, 0.49f, 0.68f, 0.83f, 0.93f, 0.98f, 1.f, 1.f};

int64_t tiles_of(int64_t n) {
  return (n + kTile - 1) / kTile;
}

class TileCodec final : public Codec {
 public:
  explicit TileCodec(const CodecSpec& spec)
      : spec_(spec),
        max_level_((1 << spec.bits) - 1),
        step_per_max_(static_cast<float>(2.0 * kClip[spec.bits] / max_level_)),
        half_levels_(static_cast<float>(max_level_ / 2.0)) {}
  const CodecSpec& spec() const override { return spec_; }
  size_t table_bytes(int64_t n) const override { return 4 * static_cast<size_t>(tiles_of(n)); }
  size_t payload_bytes(int64_t n) const override { return packed_bytes(n, spec_.bits); }

  void encode_values(const float* x, int64_t n, uint8_t* table, uint8_t* payload,
                     int threads) const override {
    require_finite(x, n);
    for_each_block(n, chunk_count(n, threads, kMinEncodeChunk), [&](int64_t start, int64_t count) {
      uint16_t codes[kCodeBlock];
      for (int64_t t = 0; t < count; t += kTile) {
        const float* v = x + start + t;
        const int64_t len = std::min(kTile, count - t);
        float m = 0.f;
        for (int64_t i = 0; i < len; ++i)
          m = std::max(m, std::fabs(v[i]));
        put_f32(table + 4 * ((start + t) / kTile), m);
        const float step = step_of(m), lo = lo_of(step);
        quantize_grouped(v, len, nullptr, 0, &lo, &step, 0, max_level_, codes + t);
      }
      pack_bits(codes, count, spec_.bits, payload, start);
    });
  }

  void decode_values(const uint8_t* table, const uint8_t* payload, int64_t n, float* out,
                     int threads) const override {
    const std::vector<float> m = read_table(table, n);
    for_each_block(n, chunk_count(n, threads, kMinDecodeChunk), [&](int64_t start, int64_t count) {
      uint16_t codes[kCodeBlock];
      unpack_bits(payload, count, spec_.bits, codes, start);
      for (int64_t t = 0; t < count; t += kTile) {
        const float step = step_of(m[static_cast<size_t>((start + t) / kTile)]);
        const float lo = lo_of(step);
        const int64_t len = std::min(kTile, count - t);
        for (int64_t i = 0; i < len; ++i)
          out[start + t + i] = dequantize(codes[t + i], lo, step);
      }
    });
  }

  bool encodes_tensors() const override { return true; }

  void encode_tensor(const at::Tensor& values, uint8_t* table, uint8_t* payload) const override {
    const int64_t n = values.numel(), tiles = tiles_of(n);
    // Zeros pad the last tile: they change no maximum of magnitudes.
    const at::Tensor tiled =
        at::constant_pad_nd(values, {0, tiles * kTile - n}).view({tiles, kTile});
    const at::Tensor m = tiled.abs().amax(1);
    copy_to_host(m.view(at::kByte), table);
    for (int64_t t = 0; t < tiles; ++t) {
      if (!std::isfinite(get_f32(table + 4 * t))) throw_non_finite();
    }
    const auto [lo, step] = ranges(m);
    const at::Tensor levels =
        quantize_levels(tiled, lo.unsqueeze(1), step.unsqueeze(1), max_level_);
    copy_to_host(pack_codes(levels.view({-1}).narrow(0, 0, n), spec_.bits), payload);
  }

  at::Tensor decode_tensor(const uint8_t* table, const uint8_t* payload, int64_t n,
                           const c10::Device& device) const override {
    std::vector<float> m = read_table(table, n);
    const auto options = at::TensorOptions().device(device).dtype(at::kFloat);
    if (n == 0) return at::empty({0}, options);
    const int64_t tiles = tiles_of(n);
    const at::Tensor m_on_device =
        at::from_blob(m.data(), {tiles}, at::kFloat).to(device, at::kFloat, false, true);
    const auto [lo, step] = ranges(m_on_device);
    const at::Tensor codes = unpack_codes(
        bytes_on(payload, static_cast<int64_t>(payload_bytes(n)), device), n, spec_.bits);
    const at::Tensor tiled =
        at::constant_pad_nd(codes, {0, tiles * kTile - n}).view({tiles, kTile}).to(at::kFloat);
    return (lo.unsqueeze(1) + tiled * step.unsqueeze(1)).view({-1}).narrow(0, 0, n);
  }

 private:
  float step_of(float m) const { return step_per_max_ * m; }
  float lo_of(float step) const { return -(step * half_levels_); }

  // Per-tile (lo, step) as tensors, by the same float32 operations as step_of and lo_of.
  std::pair<at::Tensor, at::Tensor> ranges(const at::Tensor& m) const {
    const auto scalar = [&](float v) { return at::full({}, v, m.options()); };
    const at::Tensor step = m * scalar(step_per_max_);
    return {(step * scalar(half_levels_)).neg(), step};
  }

  static std::vector<float> read_table(const uint8_t* table, int64_t n) {
    std::vector<float> m(static_cast<size_t>(tiles_of(n)));
    for (size_t t = 0; t < m.size(); ++t) {
      m[t] = get_f32(table + 4 * t);
      if (!std::isfinite(m[t]) || m[t] < 0.f)
        throw CorruptPacket("tile packet: a tile's magnitude is negative or not finite");
    }
    return m;
  }

  CodecSpec spec_;
  int max_level_;
  float step_per_max_, half_levels_;
};

void check_tile(const CodecSpec& spec) {
  if (spec.bits < 1 || spec.bits > 8) throw std::invalid_argument("bits must be 1..8");
}

std::unique_ptr<Codec> make_tile(const CodecSpec& spec) {
  return std::make_unique<TileCodec>(spec);
}

}  // namespace

extern const CodecFamily kTileCodecFamily{
    "tile",
    "tile:B",
    "B-bit symmetric levels per tile of 256 values, clipped at a fraction of the tile's "
    "largest magnitude (B 1..8; for rotated values: rot:tile:B)",
    "tile:4",
    parse_bits_parameter,
    check_tile,
    bits_parameter,
    make_tile};

}  // namespace dtrain::compress
