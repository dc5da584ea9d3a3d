#include "dtrain/models/batch_context.h"

namespace dtrain::models {
namespace {

at::Tensor& mask_slot() {
  thread_local at::Tensor mask;
  return mask;
}

}  // namespace

const at::Tensor& current_attention_mask() {
  return mask_slot();
}

AttentionMaskScope::AttentionMaskScope(at::Tensor mask) : previous_(std::move(mask_slot())) {
  mask_slot() = std::move(mask);
}

AttentionMaskScope::~AttentionMaskScope() {
  mask_slot() = std::move(previous_);
}

}  // namespace dtrain::models
