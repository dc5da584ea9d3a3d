#include "dtrain/compress/error_feedback.h"

#include <ATen/ATen.h>

namespace dtrain::compress {

Packet ErrorFeedback::encode(const Codec& codec, const at::Tensor& input, at::Tensor& decoded) {
  const at::Tensor x = input.to(at::kFloat);
  if (!residual_.defined() || !residual_.sizes().equals(x.sizes())) residual_ = at::zeros_like(x);
  residual_ = residual_.to(x.device());  // one restored from a checkpoint is on the CPU
  const at::Tensor corrected = x + residual_;
  Packet packet = compress::encode(codec, corrected);
  decoded = compress::decode(packet, x.device()).to(at::kFloat);  // beside the residual
  residual_ = corrected - decoded;
  decoded = decoded.to(input.scalar_type());
  return packet;
}

Packet ErrorFeedback::encode(const Codec& codec, const at::Tensor& input) {
  at::Tensor decoded;
  return encode(codec, input, decoded);
}

}  // namespace dtrain::compress
