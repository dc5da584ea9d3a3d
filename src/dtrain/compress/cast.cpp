// none / fp16 / bf16: no table; the payload is the values in the wire type. Three rows of
// the codec table (wire ids 0, 1, 2), one class.
#include <ATen/ATen.h>

#include "dtrain/compress/codec_family.h"
#include "dtrain/compress/codecs.h"
#include "dtrain/compress/tensor_kernels.h"

namespace dtrain::compress {
namespace {

at::ScalarType cast_wire_type(CodecId id) {
  return id == CodecId::kFp16 ? at::kHalf : id == CodecId::kBf16 ? at::kBFloat16 : at::kFloat;
}

class CastCodec final : public Codec {
 public:
  explicit CastCodec(const CodecSpec& spec) : spec_(spec) {}
  const CodecSpec& spec() const override { return spec_; }
  size_t table_bytes(int64_t) const override { return 0; }
  size_t payload_bytes(int64_t n) const override {
    return static_cast<size_t>(n) * static_cast<size_t>(spec_.bits / 8);
  }

  // LibTorch's copy runs on its own intra-op threads: `threads` is not used.
  void encode_values(const float* x, int64_t n, uint8_t*, uint8_t* payload, int) const override {
    require_finite(x, n);
    if (n == 0) return;
    const at::Tensor in = at::from_blob(const_cast<float*>(x), {n}, at::kFloat);
    if (spec_.id == CodecId::kNone) {
      std::memcpy(payload, x, static_cast<size_t>(n) * 4);
      return;
    }
    const at::Tensor out = at::from_blob(payload, {n}, cast_wire_type(spec_.id));
    out.copy_(in);
  }

  void decode_values(const uint8_t*, const uint8_t* payload, int64_t n, float* out,
                     int) const override {
    if (n == 0) return;
    if (spec_.id == CodecId::kNone) {
      std::memcpy(out, payload, static_cast<size_t>(n) * 4);
      return;
    }
    const at::Tensor in =
        at::from_blob(const_cast<uint8_t*>(payload), {n}, cast_wire_type(spec_.id));
    at::from_blob(out, {n}, at::kFloat).copy_(in);
  }

  bool encodes_tensors() const override { return true; }

  void encode_tensor(const at::Tensor& values, uint8_t*, uint8_t* payload) const override {
    finite_key_range(values);  // for its check: NaN and Inf are refused by every codec
    const at::Tensor wire = values.to(cast_wire_type(spec_.id));
    at::from_blob(payload, {wire.numel()}, wire.scalar_type()).copy_(wire);
  }

  at::Tensor decode_tensor(const uint8_t*, const uint8_t* payload, int64_t n,
                           const c10::Device& device) const override {
    const at::Tensor wire = bytes_on(payload, static_cast<int64_t>(payload_bytes(n)), device);
    return wire.view(cast_wire_type(spec_.id)).to(at::kFloat);
  }

 private:
  CodecSpec spec_;
};

CodecSpec parse_cast(const std::vector<std::string>& parameters) {
  require_parameter_count(parameters, 0, 0);
  return {};  // bits: the table's check sets none's 32 apart from the 16-bit floats'
}

std::string cast_parameters(const CodecSpec&) {
  return "";
}

std::unique_ptr<Codec> make_cast(const CodecSpec& spec) {
  return std::make_unique<CastCodec>(spec);
}

CodecSpec parse_half(const std::vector<std::string>& parameters) {
  CodecSpec spec = parse_cast(parameters);
  spec.bits = 16;
  return spec;
}

void check_none(const CodecSpec& spec) {
  if (spec.bits != 32) throw std::invalid_argument("none has 32 bits");
}

void check_half(const CodecSpec& spec) {
  if (spec.bits != 16) throw std::invalid_argument("16-bit float has 16 bits");
}

}  // namespace

extern const CodecFamily kNoneCodecFamily{"none",     "none",     "raw float32",   "none",
                                          parse_cast, check_none, cast_parameters, make_cast};
extern const CodecFamily kFp16CodecFamily{"fp16",          "fp16",     "IEEE half-precision floats",
                                          "fp16",          parse_half, check_half,
                                          cast_parameters, make_cast};
extern const CodecFamily kBf16CodecFamily{
    "bf16",          "bf16",     "bfloat16 (float32's exponent, 8 bits of mantissa)",
    "bf16",          parse_half, check_half,
    cast_parameters, make_cast};

}  // namespace dtrain::compress
