#include "dtrain/train/model_shape.h"

#include <algorithm>

#include "dtrain/comm/small_message.h"

namespace dtrain::train {
namespace {
constexpr int64_t kMaxDims = 3;
constexpr int64_t kMaxValue = int64_t{1} << 40;
}  // namespace

ModelShape ModelShape::of(const models::ModelConfig& config) {
  ModelShape s;
  s.num_classes = config.num_classes;
  s.vocab = config.transformer.vocab;
  s.pad_id = config.transformer.pad_id;
  s.input_shape = config.input_shape;
  return s;
}

void ModelShape::apply_to(models::ModelConfig& config) const {
  config.num_classes = num_classes;
  config.transformer.vocab = vocab;
  config.transformer.pad_id = pad_id;
  config.input_shape = input_shape;
}

at::Tensor ModelShape::to_message() const {
  comm::MessageWriter w;
  w.count(loaded ? num_classes : -1).count(vocab).count(pad_id);
  const auto dims = std::min<int64_t>(kMaxDims, static_cast<int64_t>(input_shape.size()));
  w.count(dims);
  for (int64_t i = 0; i < kMaxDims; ++i)
    w.count(i < dims ? input_shape[static_cast<size_t>(i)] : 0);
  return w.finish(at::kLong);
}

ModelShape ModelShape::from_message(const at::Tensor& message, const std::string& from) {
  comm::MessageReader r(message, kValues, "model shape from " + from);
  ModelShape s;
  s.num_classes = r.count(-1, kMaxValue, "classes");
  s.loaded = s.num_classes >= 0;
  s.vocab = r.count(0, kMaxValue, "vocabulary");
  s.pad_id = r.count(0, kMaxValue, "padding id");
  const int64_t dims = r.count(0, kMaxDims, "dimensions");
  for (int64_t i = 0; i < kMaxDims; ++i) {
    const int64_t d = r.count(0, kMaxValue, "dimension");
    if (i < dims) s.input_shape.push_back(d);
  }
  return s;
}

}  // namespace dtrain::train
