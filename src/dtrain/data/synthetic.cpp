// A learnable synthetic dataset of any shape: each class has a fixed random prototype;
// a sample is its class prototype plus Gaussian noise. Deterministic in the seed.
#include <ATen/ATen.h>

#include "dtrain/data/dataset.h"

namespace dtrain::data {

Splits make_synthetic(const DataConfig& c) {
  if (c.input_shape.size() != 3) throw std::invalid_argument("--input-shape must be C,H,W");
  for (int64_t d : c.input_shape) {
    if (d < 1) throw std::invalid_argument("--input-shape dimensions must be positive");
  }
  if (c.num_classes < 2) throw std::invalid_argument("synthetic data needs --num-classes >= 2");
  if (c.synthetic_size < 1) throw std::invalid_argument("--synthetic-size must be positive");
  at::Generator gen = at::detail::createCPUGenerator(c.seed * 7919 + 17);
  std::vector<int64_t> proto_shape{c.num_classes};
  proto_shape.insert(proto_shape.end(), c.input_shape.begin(), c.input_shape.end());
  const at::Tensor prototypes = at::randn(proto_shape, gen);
  auto make = [&](int64_t n, const std::string& name) {
    Dataset d;
    d.name = name;
    d.num_classes = c.num_classes;
    d.labels = at::randint(0, c.num_classes, {n}, gen, at::kLong);
    std::vector<int64_t> shape{n};
    shape.insert(shape.end(), c.input_shape.begin(), c.input_shape.end());
    d.images = prototypes.index_select(0, d.labels) + 1.5 * at::randn(shape, gen);
    return d;
  };
  Splits s;
  s.train = make(c.synthetic_size, "synthetic-train");
  s.test = make(std::max<int64_t>(1, c.synthetic_size / 5), "synthetic-test");
  return s;
}

}  // namespace dtrain::data
