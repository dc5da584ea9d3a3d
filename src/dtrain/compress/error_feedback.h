// Error feedback for compressed gradients (EF-SGD, Seide et al. 2014; Karimireddy et al.
// 2019): what a lossy codec dropped this step is added back before coding the next step,
// so the error does not accumulate in the model.
#pragma once

#include <ATen/core/Tensor.h>

#include "dtrain/compress/codec.h"

namespace dtrain::compress {

class ErrorFeedback {
 public:
  // Encodes input + residual, keeps residual = (input + residual) - decode(packet).
  // The residual starts at zero and follows the input's shape (a shape change resets it)
  // and device; the packet is coded and decoded on the input's device (codec.h).
  Packet encode(const Codec& codec, const at::Tensor& input);

  // Same, with the decoded value returned too (saves the caller a second decode).
  Packet encode(const Codec& codec, const at::Tensor& input, at::Tensor& decoded);

  const at::Tensor& residual() const { return residual_; }
  void reset() { residual_ = at::Tensor(); }
  // A residual saved earlier (checkpoints): owed to the next input of its shape.
  void restore(at::Tensor residual) { residual_ = std::move(residual); }

 private:
  at::Tensor residual_;
};

}  // namespace dtrain::compress
