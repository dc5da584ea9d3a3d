#include "dtrain/parallel/flat_parameters.h"

#include <ATen/ATen.h>

#include <algorithm>

namespace dtrain::parallel {

FlatParameters::FlatParameters(std::vector<at::Tensor> parameters)
    : parameters_(std::move(parameters)) {
  for (const auto& p : parameters_)
    size_ += p.numel();
}

namespace {

// Calls part(p, start, from, count) for each parameter p holding values of [begin, end) of
// the concatenation: p's values [start, start + count) are the range's [from, from + count).
template <class Part>
void each_part(const std::vector<at::Tensor>& parameters, int64_t begin, int64_t end, Part part) {
  int64_t offset = 0;
  for (const auto& p : parameters) {
    const int64_t from = std::max(begin, offset), to = std::min(end, offset + p.numel());
    if (from < to) part(p, from - offset, from - begin, to - from);
    offset += p.numel();
  }
}

}  // namespace

at::Tensor FlatParameters::read(int64_t begin, int64_t count) const {
  std::vector<at::Tensor> parts;
  each_part(parameters_, begin, begin + count,
            [&](const at::Tensor& p, int64_t start, int64_t, int64_t n) {
              parts.push_back(p.detach().reshape({-1}).narrow(0, start, n));
            });
  return at::cat(parts);
}

void FlatParameters::write(int64_t begin, const at::Tensor& values, double own_weight) const {
  each_part(parameters_, begin, begin + values.numel(),
            [&](const at::Tensor& p, int64_t start, int64_t from, int64_t count) {
              // A view where the layout allows (contiguous), else a copy written back below.
              at::Tensor flat = p.detach().reshape({-1});
              at::Tensor part = flat.narrow(0, start, count);
              const at::Tensor source = values.narrow(0, from, count).to(p.device());
              if (own_weight == 0)
                part.copy_(source);
              else
                part.mul_(own_weight).add_(source, 1 - own_weight);
              if (!p.is_contiguous()) p.detach().copy_(flat.view(p.sizes()));
            });
}

void nesterov_outer_step(at::Tensor anchor, at::Tensor momentum, const at::Tensor& g, double lr,
                         double mu) {
  momentum.mul_(mu).add_(g);
  anchor.sub_(g.add(momentum, mu), lr);
}

}  // namespace dtrain::parallel
