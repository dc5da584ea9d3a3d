// rot[:T]:CODEC — a randomized Hadamard rotation (hadamard.h) over tiles of T values, then a
// value codec (tile, uniform, sortquant, kmeans) on the rotated values; decoding inverts
// both. The rotation spreads a tile's outliers over all of its values, so a few large ones
// no longer stretch the range every other value is quantized in: low-bit codes of rotated
// values lose far less (the trick of QuaRot-style rotations, of DRIVE and EDEN for
// distributed mean estimation, and of TAH-Quant for activations).
//
// The values are centered first (a rotation keeps energy, not variance: ReLU outputs'
// mean would otherwise be spread over every value as noise to code), then padded with
// zeros to whole tiles; the value codec codes the padded count. The center is the mean up
// to 2^-22 of the largest magnitude, computed exactly (an integer sum), so every device
// finds the same one. Table: [seed (uint32), center (float32)], then the value codec's.
// The seed is derived from the value count (the same tensor size always rotates alike).
#include <ATen/ATen.h>

#include <cctype>
#include <cmath>
#include <cstring>

#include "dtrain/compress/chunks.h"
#include "dtrain/compress/codec_family.h"
#include "dtrain/compress/codecs.h"
#include "dtrain/compress/hadamard.h"

namespace dtrain::compress {
namespace {

constexpr int kDefaultTileLog2 = 8;  // 256 values (docs/results.md: the tile sweep)
constexpr size_t kHeadBytes = 8;

// The center: the values scaled by a power of two that puts the largest magnitude below
// 2^22, truncated to integers and summed exactly (order-free, so the same on every
// device), divided by n. Blocks of 256 such integers sum in int32 (below 2^30), which
// vectorizes. Values all below 2^-105 (the scale would overflow a float) get center 0.
constexpr int kCenterBits = 22;
constexpr int64_t kCenterBlock = 256;

// 0 when no scale applies.
float center_scale(float largest_magnitude) {
  if (largest_magnitude == 0.f) return 0.f;
  int exponent = 0;
  std::frexp(largest_magnitude, &exponent);  // largest < 2^exponent
  if (kCenterBits - exponent > 127) return 0.f;
  return std::ldexp(1.f, kCenterBits - exponent);
}

float center_of(int64_t sum, float scale, int64_t n) {
  return static_cast<float>(static_cast<double>(sum) / scale / static_cast<double>(n));
}

float center_of(const float* x, int64_t n, float largest_magnitude) {
  const float scale = center_scale(largest_magnitude);
  if (scale == 0.f) return 0.f;
  int64_t sum = 0;
  for (int64_t begin = 0; begin < n; begin += kCenterBlock) {
    const int64_t end = std::min(n, begin + kCenterBlock);
    int32_t block = 0;
    for (int64_t i = begin; i < end; ++i)
      block += static_cast<int32_t>(x[i] * scale);
    sum += block;
  }
  return center_of(sum, scale, n);
}

float center_of(const at::Tensor& x) {
  const float largest = x.abs().amax().item<float>();
  if (!std::isfinite(largest)) throw_non_finite();
  const float scale = center_scale(largest);
  if (scale == 0.f) return 0.f;
  const at::Tensor scaled = x * at::full({}, scale, x.options());
  return center_of(scaled.to(at::kInt).sum(at::kLong).item<int64_t>(), scale, x.numel());
}

// The value codec's spec inside a rot spec.
CodecSpec inner_spec_of(const CodecSpec& spec) {
  CodecSpec inner = spec;
  inner.id = spec.inner;
  inner.inner = CodecId::kNone;
  inner.tile_log2 = 0;
  return inner;
}

class RotatedCodec final : public Codec {
 public:
  explicit RotatedCodec(const CodecSpec& spec)
      : spec_(spec), inner_(make_codec(inner_spec_of(spec))) {}
  const CodecSpec& spec() const override { return spec_; }
  size_t table_bytes(int64_t n) const override {
    return kHeadBytes + inner_->table_bytes(padded(n));
  }
  size_t payload_bytes(int64_t n) const override { return inner_->payload_bytes(padded(n)); }

  void encode_values(const float* x, int64_t n, uint8_t* table, uint8_t* payload,
                     int threads) const override {
    const ValueRange range = finite_range(x, n, chunk_count(n, threads, kMinEncodeChunk));
    const Rotation r = rotation(n);
    const float center = center_of(x, n, std::max(-range.lo, range.hi));
    write_head(table, r, center);
    std::vector<float> rotated(static_cast<size_t>(padded(n)), 0.f);
    for (int64_t i = 0; i < n; ++i)
      rotated[static_cast<size_t>(i)] = x[i] - center;
    rotate(rotated.data(), padded(n), r, threads);
    inner_->encode_values(rotated.data(), padded(n), table + kHeadBytes, payload, threads);
  }

  void decode_values(const uint8_t* table, const uint8_t* payload, int64_t n, float* out,
                     int threads) const override {
    float center;
    const Rotation r = read_head(table, n, center);
    std::vector<float> rotated(static_cast<size_t>(padded(n)));
    inner_->decode_values(table + kHeadBytes, payload, padded(n), rotated.data(), threads);
    unrotate(rotated.data(), padded(n), r, threads);
    for (int64_t i = 0; i < n; ++i)
      out[i] = rotated[static_cast<size_t>(i)] + center;
  }

  bool encodes_tensors() const override { return inner_->encodes_tensors(); }

  void encode_tensor(const at::Tensor& values, uint8_t* table, uint8_t* payload) const override {
    const int64_t n = values.numel();
    const Rotation r = rotation(n);
    const float center = center_of(values);  // refuses NaN and Inf
    write_head(table, r, center);
    const at::Tensor centered = values - at::full({}, center, values.options());
    const at::Tensor rotated = rotate(at::constant_pad_nd(centered, {0, padded(n) - n}), r);
    inner_->encode_tensor(rotated, table + kHeadBytes, payload);
  }

  at::Tensor decode_tensor(const uint8_t* table, const uint8_t* payload, int64_t n,
                           const c10::Device& device) const override {
    float center;
    const Rotation r = read_head(table, n, center);
    const at::Tensor rotated =
        inner_->decode_tensor(table + kHeadBytes, payload, padded(n), device);
    if (n == 0) return rotated;
    return unrotate(rotated, r).narrow(0, 0, n) + at::full({}, center, rotated.options());
  }

 private:
  int64_t padded(int64_t n) const {
    const int64_t tile = int64_t{1} << spec_.tile_log2;
    return (n + tile - 1) / tile * tile;
  }
  Rotation rotation(int64_t n) const {
    Rotation r;
    r.tile_log2 = spec_.tile_log2;
    r.seed = static_cast<uint32_t>((static_cast<uint64_t>(n) * 0x9E3779B97F4A7C15ull) >> 32);
    return r;
  }
  static void write_head(uint8_t* table, const Rotation& r, float center) {
    std::memcpy(table, &r.seed, 4);
    put_f32(table + 4, center);
  }
  Rotation read_head(const uint8_t* table, int64_t n, float& center) const {
    Rotation r = rotation(n);
    std::memcpy(&r.seed, table, 4);
    center = get_f32(table + 4);
    if (!std::isfinite(center)) throw CorruptPacket("rot packet: the center is not finite");
    return r;
  }

  CodecSpec spec_;
  std::unique_ptr<Codec> inner_;
};

// rot:CODEC or rot:T:CODEC.
CodecSpec parse_rot(const std::vector<std::string>& parameters) {
  if (parameters.empty()) throw std::invalid_argument("rot needs a value codec: rot[:T]:CODEC");
  size_t first = 0;
  int tile_log2 = kDefaultTileLog2;
  if (!parameters[0].empty() && std::isdigit(static_cast<unsigned char>(parameters[0][0]))) {
    const int tile = integer_parameter(parameters[0]);
    tile_log2 = 0;
    while ((1 << tile_log2) < tile && tile_log2 < 31)
      ++tile_log2;
    if (tile < 2 || (1 << tile_log2) != tile)
      throw std::invalid_argument("the tile must be a power of two from 2 to 65536");
    first = 1;
  }
  std::string inner_name;
  for (size_t i = first; i < parameters.size(); ++i)
    inner_name += (i > first ? ":" : "") + parameters[i];
  if (inner_name.empty()) throw std::invalid_argument("rot needs a value codec: rot[:T]:CODEC");
  CodecSpec inner = parse_codec(inner_name);
  CodecSpec spec = inner;
  spec.inner = inner.id;
  spec.tile_log2 = tile_log2;
  return spec;
}

void check_rot(const CodecSpec& spec) {
  if (spec.inner != CodecId::kUniform && spec.inner != CodecId::kSortQuant &&
      spec.inner != CodecId::kKMeans && spec.inner != CodecId::kTile)
    throw std::invalid_argument("rot's value codec must be tile, uniform, sortquant or kmeans");
  if (spec.tile_log2 < 1 || spec.tile_log2 > 16)
    throw std::invalid_argument("the tile must be a power of two from 2 to 65536");
  make_codec(inner_spec_of(spec));  // checks the value codec's own parameters
}

std::string rot_parameters(const CodecSpec& spec) {
  // Names are made before a packet's parameters are checked: no shift past the int.
  const std::string tile = spec.tile_log2 < 31 ? std::to_string(int64_t{1} << spec.tile_log2)
                                               : "2^" + std::to_string(spec.tile_log2);
  return ":" + tile + ":" + to_string(inner_spec_of(spec));
}

std::unique_ptr<Codec> make_rot(const CodecSpec& spec) {
  return std::make_unique<RotatedCodec>(spec);
}

}  // namespace

extern const CodecFamily kRotatedCodecFamily{
    "rot",
    "rot[:T]:CODEC",
    "a randomized Hadamard rotation over tiles of T values (default 256), then CODEC (tile, "
    "uniform, sortquant, kmeans) on the rotated values: outliers spread over their tile",
    "rot:tile:4",
    parse_rot,
    check_rot,
    rot_parameters,
    make_rot,
    /*wraps_a_codec=*/true};

}  // namespace dtrain::compress
