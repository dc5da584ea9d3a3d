// none / fp16 / bf16: no table; the payload is the values in the wire type.
#include <ATen/ATen.h>

#include "dtrain/compress/codecs.h"

namespace dtrain::compress {
namespace {

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

 private:
  CodecSpec spec_;
};

}  // namespace

std::unique_ptr<Codec> make_cast_codec(const CodecSpec& spec) {
  return std::make_unique<CastCodec>(spec);
}

}  // namespace dtrain::compress
