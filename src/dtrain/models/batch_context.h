// What some blocks need of a batch beside their one input tensor: a text batch's attention
// mask. Blocks keep one tensor in and one out (so a pipeline can cut between any two and
// compress what crosses); whoever runs blocks on a batch (an engine, a pipeline stage,
// describe()) opens an AttentionMaskScope for that batch around the forward pass, and an
// encoder layer reads current_attention_mask(). Backward needs no scope: autograd keeps
// what the forward pass used. Per thread, so concurrent runners do not see each other's.
#pragma once

#include <ATen/core/Tensor.h>

namespace dtrain::models {

// [B, T], nonzero where position t of sample b is a real token; undefined when no scope is
// open (every position is real).
const at::Tensor& current_attention_mask();

class AttentionMaskScope {
 public:
  explicit AttentionMaskScope(at::Tensor mask);  // an undefined mask: every position real
  ~AttentionMaskScope();
  AttentionMaskScope(const AttentionMaskScope&) = delete;
  AttentionMaskScope& operator=(const AttentionMaskScope&) = delete;

 private:
  at::Tensor previous_;
};

}  // namespace dtrain::models
