#include "dtrain/compress/baselines.h"

#include <ATen/ATen.h>

namespace dtrain::compress::baseline {

SortQuantResult sortquant_encode(const at::Tensor& input, int level_bits, int split_bits) {
  const at::Tensor x = input.to(at::kFloat).reshape({-1});
  const int64_t n = x.numel();
  const int64_t groups = int64_t{1} << split_bits;
  const int64_t levels = int64_t{1} << level_bits;
  auto [sorted, order] = at::sort(x);
  at::Tensor codes_sorted = at::zeros({n}, at::kInt);
  at::Tensor table = at::zeros({groups, 2}, at::kFloat);
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t begin = g * n / groups, end = (g + 1) * n / groups;
    if (begin == end) continue;
    const at::Tensor part = sorted.slice(0, begin, end);
    const at::Tensor lo = part[0];
    const at::Tensor hi = part[end - begin - 1];
    at::Tensor step = (hi - lo) / static_cast<double>(levels - 1);
    if (levels == 1 || !(hi.item<float>() > lo.item<float>())) step = at::zeros_like(step);
    at::Tensor level = step.item<float>() > 0
                           ? at::round(at::clamp((part - lo) / step, 0, levels - 1))
                           : at::zeros_like(part);
    codes_sorted.slice(0, begin, end).copy_(level.to(at::kInt) + static_cast<int>(g * levels));
    table[g][0] = lo;
    table[g][1] = step;
  }
  at::Tensor codes = at::empty_like(codes_sorted);
  codes.scatter_(0, order, codes_sorted);
  return {codes.view(input.sizes()), table};
}

at::Tensor sortquant_decode(const SortQuantResult& encoded, int level_bits) {
  const at::Tensor codes = encoded.codes.reshape({-1});
  auto [sorted_codes, order] = at::sort(codes);
  const at::Tensor group = at::floor_divide(sorted_codes, 1 << level_bits).to(at::kLong);
  const at::Tensor level = at::remainder(sorted_codes, 1 << level_bits).to(at::kFloat);
  const at::Tensor lo = encoded.table.select(1, 0).index_select(0, group);
  const at::Tensor step = encoded.table.select(1, 1).index_select(0, group);
  const at::Tensor values_sorted = lo + level * step;
  at::Tensor out = at::empty_like(values_sorted);
  out.scatter_(0, order, values_sorted);
  return out.view(encoded.codes.sizes());
}

KMeansResult kmeans(const at::Tensor& input, int k, int iters) {
  const at::Tensor x = input.to(at::kFloat).reshape({-1});
  const int64_t n = x.numel();
  const at::Tensor sorted = std::get<0>(at::sort(x));
  at::Tensor c = at::empty({k}, at::kFloat);
  for (int j = 0; j < k; ++j) {
    const int64_t begin = j * n / k, end = std::max((j + 1) * n / k, begin + 1);
    c[j] = sorted.slice(0, std::min(begin, n - 1), std::min(end, n)).mean();
  }
  constexpr int64_t kChunk = 1 << 20;  // bounds the n x k distance matrix
  at::Tensor assign = at::empty({n}, at::kLong);
  for (int it = 0; it <= iters; ++it) {
    for (int64_t a = 0; a < n; a += kChunk) {
      const at::Tensor part = x.slice(0, a, std::min(n, a + kChunk));
      assign.slice(0, a, a + part.numel())
          .copy_((part.unsqueeze(1) - c.unsqueeze(0)).abs().argmin(1));
    }
    if (it == iters) break;
    const at::Tensor sums = at::zeros({k}, at::kDouble).index_add_(0, assign, x.to(at::kDouble));
    const at::Tensor counts =
        at::zeros({k}, at::kDouble).index_add_(0, assign, at::ones({n}, at::kDouble));
    c = at::where(counts > 0, sums / counts.clamp_min(1), c.to(at::kDouble)).to(at::kFloat);
  }
  return {c, assign};
}

at::Tensor kmeans_decode(const KMeansResult& encoded, at::IntArrayRef shape) {
  return encoded.centroids.index_select(0, encoded.assignment).view(shape);
}

}  // namespace dtrain::compress::baseline
