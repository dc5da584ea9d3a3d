#include "dtrain/compress/tensor_coding.h"

#include <ATen/ATen.h>

#include <cfloat>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "dtrain/compress/bitpack.h"
#include "dtrain/compress/codecs.h"
#include "dtrain/compress/selection.h"

namespace dtrain::compress {
namespace {

// selection.h's order_key with the sign bit flipped, so that signed int32 comparisons
// (sort, aminmax) order it: non-negative floats keep their bits, negatives flip all but
// the sign.
int32_t signed_key(float v) {
  return static_cast<int32_t>(order_key(v) ^ 0x80000000u);
}

float value_of_signed_key(int32_t key) {
  const uint32_t bits = static_cast<uint32_t>(key) ^ (key < 0 ? 0x7FFFFFFFu : 0u);
  float v;
  std::memcpy(&v, &bits, 4);
  return v;
}

at::Tensor signed_keys(const at::Tensor& values) {
  const at::Tensor bits = values.view(at::kInt);
  return bits.bitwise_xor(bits.bitwise_right_shift(31).bitwise_and(0x7FFFFFFF));
}

// Host copies of the keys at `ranks` of `keys` (1-D, on any device), in one transfer.
std::vector<int32_t> keys_at(const at::Tensor& keys, const std::vector<int64_t>& ranks) {
  const at::Tensor index =
      at::tensor(ranks, at::TensorOptions().dtype(at::kLong)).to(keys.device());
  const at::Tensor picked = keys.index_select(0, index).cpu().contiguous();
  const int32_t* p = picked.data_ptr<int32_t>();
  return std::vector<int32_t>(p, p + picked.numel());
}

// Finite floats' keys lie in [key(-FLT_MAX), key(FLT_MAX)]; NaN and Inf outside.
void require_finite_keys(int32_t lowest, int32_t highest) {
  if (lowest < signed_key(-FLT_MAX) || highest > signed_key(FLT_MAX)) throw_non_finite();
}

struct Range {
  float lo, hi;
};

// Minimum and maximum in key order (-0 below +0), as the CPU's finite_range finds them.
Range finite_key_range(const at::Tensor& values) {
  const auto [kmin, kmax] = at::aminmax(signed_keys(values));
  const at::Tensor both = at::stack({kmin, kmax}).cpu();
  const int32_t lowest = both[0].item<int32_t>(), highest = both[1].item<int32_t>();
  require_finite_keys(lowest, highest);
  return {value_of_signed_key(lowest), value_of_signed_key(highest)};
}

// quantize() of codecs.h, elementwise: round-half-even((x - lo) / step) clamped to
// [0, max_level], 0 where step is 0. lo and step broadcast against x and live on its device.
at::Tensor quantize_levels(const at::Tensor& x, const at::Tensor& lo, const at::Tensor& step,
                           int max_level) {
  const at::Tensor live = step > 0;
  const at::Tensor divisor = at::where(live, step, at::ones_like(step));
  const at::Tensor level = ((x - lo) / divisor).clamp(0, max_level).round();
  return level.masked_fill(live.logical_not(), 0).to(at::kInt);
}

// pack_bits over a whole tensor of int32 codes (< 2^bits): LSB-first, the last byte
// zero-padded. Eight codes fill exactly `bits` bytes; code j of a group starts at bit
// j * bits and, shifted to its byte, spans at most 3 bytes (bits + 7 <= 23).
at::Tensor pack_codes(const at::Tensor& codes, int bits) {
  const int64_t n = codes.numel();
  if (bits == 8) return codes.to(at::kByte);
  const int64_t groups = (n + 7) / 8;
  const at::Tensor padded = at::constant_pad_nd(codes, {0, groups * 8 - n}).view({groups, 8});
  at::Tensor bytes = at::zeros({groups, bits + 2}, codes.options());
  for (int j = 0; j < 8; ++j) {
    const int first_bit = j * bits;
    const at::Tensor shifted = padded.select(1, j).bitwise_left_shift(first_bit % 8);
    for (int k = 0; k < 3; ++k) {
      bytes.select(1, first_bit / 8 + k)
          .bitwise_or_(shifted.bitwise_right_shift(8 * k).bitwise_and(0xFF));
    }
  }
  return bytes.narrow(1, 0, bits)
      .to(at::kByte)
      .reshape({-1})
      .narrow(0, 0, static_cast<int64_t>(packed_bytes(n, bits)));
}

// unpack_bits over a whole payload (uint8), into n int32 codes.
at::Tensor unpack_codes(const at::Tensor& payload, int64_t n, int bits) {
  if (bits == 8) return payload.to(at::kInt);
  const int64_t groups = (n + 7) / 8;
  // Two zero bytes after each group: a code's 3-byte window may reach past its group,
  // into bits the mask drops.
  at::Tensor bytes = at::zeros({groups, bits + 2}, payload.options().dtype(at::kInt));
  bytes.narrow(1, 0, bits)
      .copy_(
          at::constant_pad_nd(payload, {0, groups * bits - payload.numel()}).view({groups, bits}));
  at::Tensor codes = at::empty({groups, 8}, bytes.options());
  for (int j = 0; j < 8; ++j) {
    const int first_bit = j * bits, byte = first_bit / 8;
    const at::Tensor window = bytes.select(1, byte)
                                  .bitwise_or(bytes.select(1, byte + 1).bitwise_left_shift(8))
                                  .bitwise_or(bytes.select(1, byte + 2).bitwise_left_shift(16));
    codes.select(1, j).copy_(
        window.bitwise_right_shift(first_bit % 8).bitwise_and((1 << bits) - 1));
  }
  return codes.view({-1}).narrow(0, 0, n);
}

void copy_to_host(const at::Tensor& bytes, uint8_t* out) {
  if (bytes.numel() == 0) return;
  at::from_blob(out, {bytes.numel()}, at::kByte).copy_(bytes);
}

void encode_cast(const CodecSpec& spec, const at::Tensor& values, uint8_t* payload) {
  finite_key_range(values);  // for its check: NaN and Inf are refused by every codec
  const at::Tensor wire = values.to(cast_wire_type(spec.id));
  at::from_blob(payload, {wire.numel()}, wire.scalar_type()).copy_(wire);
}

void encode_uniform(const CodecSpec& spec, const at::Tensor& values, uint8_t* table,
                    uint8_t* payload) {
  const Range range = finite_key_range(values);
  const int max_level = (1 << spec.bits) - 1;
  const float step = level_step(range.lo, range.hi, max_level + 1);
  put_f32(table, range.lo);
  put_f32(table + 4, step);
  const auto scalar = [&](float v) { return at::full({}, v, values.options()); };
  copy_to_host(
      pack_codes(quantize_levels(values, scalar(range.lo), scalar(step), max_level), spec.bits),
      payload);
}

void encode_sortquant(const CodecSpec& spec, const at::Tensor& values, uint8_t* table,
                      uint8_t* payload) {
  const int64_t n = values.numel();
  const int groups = 1 << spec.split_bits, level_bits = spec.bits - spec.split_bits;
  // The order statistics by a sort of the keys: exact, as the CPU's radix select.
  const at::Tensor sorted = std::get<0>(signed_keys(values).sort());
  std::vector<int64_t> ranks = sortquant_ranks(n, groups);
  ranks.push_back(0);
  ranks.push_back(n - 1);
  const std::vector<int32_t> keys = keys_at(sorted, ranks);
  require_finite_keys(keys[keys.size() - 2], keys.back());
  std::vector<float> stats;
  for (size_t i = 0; i + 2 < keys.size(); ++i)
    stats.push_back(value_of_signed_key(keys[i]));
  const GroupTable t = sortquant_table(stats, n, groups, level_bits);
  t.write(table);

  // The table to the device in one copy: lo, step, then the thresholds.
  std::vector<float> host = t.lo;
  host.insert(host.end(), t.step.begin(), t.step.end());
  host.insert(host.end(), t.thresholds.begin(), t.thresholds.end());
  const at::Tensor table_on_device =
      at::tensor(host, at::TensorOptions().dtype(at::kFloat)).to(values.device());
  const at::Tensor lo = table_on_device.narrow(0, 0, groups);
  const at::Tensor step = table_on_device.narrow(0, groups, groups);
  const at::Tensor thresholds =
      table_on_device.narrow(0, 2 * groups, static_cast<int64_t>(t.thresholds.size()));
  // Group g holds the values >= t_g: the count of thresholds <= x (bucketize, right).
  const at::Tensor group = t.thresholds.empty()
                               ? at::zeros({n}, values.options().dtype(at::kInt))
                               : at::bucketize(values, thresholds, /*out_int32=*/true,
                                               /*right=*/true);
  const at::Tensor level = quantize_levels(values, lo.index_select(0, group),
                                           step.index_select(0, group), (1 << level_bits) - 1);
  copy_to_host(pack_codes(group.bitwise_left_shift(level_bits).bitwise_or(level), spec.bits),
               payload);
}

}  // namespace

bool encodes_with_tensor_ops(const CodecSpec& spec) {
  return spec.id != CodecId::kKMeans;
}

void encode_with_tensor_ops(const Codec& codec, const at::Tensor& values, uint8_t* table,
                            uint8_t* payload) {
  const CodecSpec& spec = codec.spec();
  if (!encodes_with_tensor_ops(spec)) {
    throw std::invalid_argument(to_string(spec) + " does not encode with tensor operations");
  }
  if (values.scalar_type() != at::kFloat || values.dim() != 1 || !values.is_contiguous()) {
    throw std::invalid_argument("encode_with_tensor_ops takes 1-D contiguous float32 values");
  }
  if (values.numel() == 0) {  // as the CPU kernels: an all-zero table, no payload
    std::memset(table, 0, codec.table_bytes(0));
  } else if (is_cast(spec.id)) {
    encode_cast(spec, values, payload);
  } else if (spec.id == CodecId::kUniform) {
    encode_uniform(spec, values, table, payload);
  } else {
    encode_sortquant(spec, values, table, payload);
  }
}

at::Tensor decode_with_tensor_ops(const Codec& codec, const uint8_t* table, const uint8_t* payload,
                                  int64_t n, const c10::Device& device) {
  const CodecSpec& spec = codec.spec();
  const at::TensorOptions on_device = at::TensorOptions().device(device);
  // Validates the table; empty for the casts, whose payload is the values.
  std::vector<float> value_of_code = codec.code_values(table);  // from_blob wants it mutable
  if (n == 0) return at::empty({0}, on_device.dtype(at::kFloat));
  // A copy even on the CPU: the result must not alias the packet.
  const at::Tensor wire = at::from_blob(const_cast<uint8_t*>(payload),
                                        {static_cast<int64_t>(codec.payload_bytes(n))}, at::kByte)
                              .to(device, at::kByte, /*non_blocking=*/false, /*copy=*/true);
  if (value_of_code.empty()) return wire.view(cast_wire_type(spec.id)).to(at::kFloat);
  const at::Tensor values =
      at::from_blob(value_of_code.data(), {static_cast<int64_t>(value_of_code.size())}, at::kFloat)
          .to(device, at::kFloat, /*non_blocking=*/false, /*copy=*/true);
  return values.index_select(0, unpack_codes(wire, n, spec.bits));
}

}  // namespace dtrain::compress
