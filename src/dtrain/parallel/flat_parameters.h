// Parameters seen as one flat vector (their concatenation in order), as DiLoCo's outer
// steps see them: read a range of it, write a range back (mixed with what is there).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace dtrain::parallel {

class FlatParameters {
 public:
  explicit FlatParameters(std::vector<at::Tensor> parameters);
  int64_t size() const { return size_; }
  const std::vector<at::Tensor>& tensors() const { return parameters_; }
  // Values [begin, begin + count) of the concatenation, flat, a copy on the parameters' device.
  at::Tensor read(int64_t begin, int64_t count) const;
  at::Tensor read_all() const { return read(0, size_); }
  // parameters[begin, begin + values.numel()) = own_weight * themselves + (1 - own_weight) *
  // values (own_weight 0: a plain copy).
  void write(int64_t begin, const at::Tensor& values, double own_weight = 0) const;

 private:
  std::vector<at::Tensor> parameters_;
  int64_t size_ = 0;
};

// SGD with Nesterov momentum on the averaged pseudo-gradient g, as torch.optim.SGD does it:
// m = mu m + g; anchor -= lr (g + mu m). In place on `anchor` and `momentum`.
void nesterov_outer_step(at::Tensor anchor, at::Tensor momentum, const at::Tensor& g, double lr,
                         double mu);

}  // namespace dtrain::parallel
