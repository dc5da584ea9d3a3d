#include "dtrain/compress/tensor_coding.h"

#include <ATen/ATen.h>

#include <cfloat>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "dtrain/compress/bitpack.h"
#include "dtrain/compress/codecs.h"
#include "dtrain/compress/selection.h"
#include "dtrain/compress/tensor_kernels.h"

namespace dtrain::compress {

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

KeyRange finite_key_range(const at::Tensor& values) {
  const auto [kmin, kmax] = at::aminmax(signed_keys(values));
  const at::Tensor both = at::stack({kmin, kmax}).cpu();
  const int32_t lowest = both[0].item<int32_t>(), highest = both[1].item<int32_t>();
  require_finite_keys(lowest, highest);
  return {value_of_signed_key(lowest), value_of_signed_key(highest)};
}

at::Tensor quantize_levels(const at::Tensor& x, const at::Tensor& lo, const at::Tensor& step,
                           int max_level) {
  const at::Tensor live = step > 0;
  const at::Tensor divisor = at::where(live, step, at::ones_like(step));
  const at::Tensor level = ((x - lo) / divisor).clamp(0, max_level).round();
  return level.masked_fill(live.logical_not(), 0).to(at::kInt);
}

// LSB-first, the last byte zero-padded. Eight codes fill exactly `bits` bytes; code j of a
// group starts at bit j * bits and, shifted to its byte, spans at most 3 bytes
// (bits + 7 <= 23).
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

at::Tensor bytes_on(const uint8_t* bytes, int64_t count, const c10::Device& device) {
  return at::from_blob(const_cast<uint8_t*>(bytes), {count}, at::kByte)
      .to(device, at::kByte, /*non_blocking=*/false, /*copy=*/true);
}

// The defaults of Codec's tensor kernels: no encoder (staged through host memory), and
// decoding as one gather from the value of every code.
void Codec::encode_tensor(const at::Tensor& /*values*/, uint8_t* /*table*/,
                          uint8_t* /*payload*/) const {
  throw std::invalid_argument(to_string(spec()) + " does not encode with tensor operations");
}

at::Tensor Codec::decode_tensor(const uint8_t* table, const uint8_t* payload, int64_t n,
                                const c10::Device& device) const {
  // Validates the table, even for no values; from_blob below wants it mutable.
  std::vector<float> value_of_code = code_values(table);
  if (n == 0) return at::empty({0}, at::TensorOptions().device(device).dtype(at::kFloat));
  const at::Tensor wire = bytes_on(payload, static_cast<int64_t>(payload_bytes(n)), device);
  const at::Tensor values =
      at::from_blob(value_of_code.data(), {static_cast<int64_t>(value_of_code.size())}, at::kFloat)
          .to(device, at::kFloat, /*non_blocking=*/false, /*copy=*/true);
  return values.index_select(0, unpack_codes(wire, n, spec().bits));
}

void encode_with_tensor_ops(const Codec& codec, const at::Tensor& values, uint8_t* table,
                            uint8_t* payload) {
  if (!codec.encodes_tensors()) {
    throw std::invalid_argument(to_string(codec.spec()) +
                                " does not encode with tensor operations");
  }
  if (values.scalar_type() != at::kFloat || values.dim() != 1 || !values.is_contiguous()) {
    throw std::invalid_argument("encode_with_tensor_ops takes 1-D contiguous float32 values");
  }
  if (values.numel() == 0) {  // as the CPU kernels: an all-zero table, no payload
    std::memset(table, 0, codec.table_bytes(0));
  } else {
    codec.encode_tensor(values, table, payload);
  }
}

at::Tensor decode_with_tensor_ops(const Codec& codec, const uint8_t* table, const uint8_t* payload,
                                  int64_t n, const c10::Device& device) {
  return codec.decode_tensor(table, payload, n, device);
}

}  // namespace dtrain::compress
