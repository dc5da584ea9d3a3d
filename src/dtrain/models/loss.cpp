#include "dtrain/models/loss.h"

#include <torch/nn/functional/loss.h>

#include <cmath>

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

std::array<int64_t, 4> count_confusion(const at::Tensor& logits, const at::Tensor& labels) {
  std::array<int64_t, 4> counts{};
  if (logits.dim() != 2 || logits.size(1) != 2) return counts;
  const at::Tensor index = (labels.clamp(0, 1) * 2 + logits.argmax(1)).to(at::kCPU);
  const at::Tensor bins = at::bincount(index, {}, 4);
  for (int64_t i = 0; i < 4; ++i)
    counts[static_cast<size_t>(i)] = bins[i].item<int64_t>();
  return counts;
}

double matthews_correlation(const std::array<int64_t, 4>& c) {
  const auto tn = static_cast<double>(c[0]), fp = static_cast<double>(c[1]),
             fn = static_cast<double>(c[2]), tp = static_cast<double>(c[3]);
  const double denominator = (tp + fp) * (tp + fn) * (tn + fp) * (tn + fn);
  return denominator > 0 ? (tp * tn - fp * fn) / std::sqrt(denominator) : 0.0;
}

}  // namespace dtrain::models
