#include "dtrain/models/loss.h"

#include <torch/nn/functional/loss.h>

#include "dtrain/base/names.h"

namespace dtrain::models {
namespace {
const EnumNames<LossKind> kLossNames("loss", {{LossKind::kCrossEntropy, "cross-entropy"}});
}

LossKind parse_loss(const std::string& name) {
  return kLossNames.parse(name);
}

std::string to_string(LossKind kind) {
  return kLossNames.to_string(kind);
}

LossFn make_loss(LossKind kind) {
  switch (kind) {
    case LossKind::kCrossEntropy:
      return [](const at::Tensor& logits, const at::Tensor& labels) {
        namespace F = torch::nn::functional;
        return F::cross_entropy(logits, labels,
                                F::CrossEntropyFuncOptions().reduction(torch::kSum));
      };
  }
  throw std::invalid_argument("unknown loss");
}

}  // namespace dtrain::models
