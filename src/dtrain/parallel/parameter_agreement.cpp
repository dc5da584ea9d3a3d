#include "dtrain/parallel/parameter_agreement.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <stdexcept>

#include "dtrain/comm/agreement.h"
#include "dtrain/comm/group.h"

namespace dtrain::parallel {
namespace {
constexpr int kShapeSlots = 6;  // per parameter: ndim, 4 leading dims, numel

}  // namespace

void check_same_parameters(comm::Group& group,
                           const std::vector<std::pair<std::string, at::Tensor>>& named) {
  const auto count = static_cast<int64_t>(named.size());
  const comm::ValueRange counts = comm::range_over_ranks(group, count);
  if (!counts.agree()) {
    throw std::invalid_argument(group.describe() + ": the ranks' models differ: this rank has " +
                                std::to_string(count) + " parameter tensors, others have between " +
                                std::to_string(counts.lo) + " and " + std::to_string(counts.hi));
  }
  auto mine = at::zeros({count, kShapeSlots}, at::kLong);
  for (int64_t i = 0; i < count; ++i) {
    const auto& t = named[static_cast<size_t>(i)].second;
    mine[i][0] = t.dim();
    for (int64_t d = 0; d < std::min<int64_t>(4, t.dim()); ++d)
      mine[i][1 + d] = t.size(d);
    mine[i][5] = t.numel();
  }
  auto reference = mine.clone();
  group.native_broadcast(reference, 0);
  int64_t first = count;
  for (int64_t i = 0; i < count; ++i) {
    if (!at::equal(mine[i], reference[i])) {
      first = i;
      break;
    }
  }
  auto earliest = at::full({1}, first, at::kLong);
  group.native_all_reduce(earliest, comm::ReduceOp::kMin);
  const int64_t bad = earliest.item<int64_t>();
  if (bad < count) {
    const auto& [name, t] = named[static_cast<size_t>(bad)];
    std::vector<int64_t> ref;
    for (int64_t d = 0; d < reference[bad][0].item<int64_t>() && d < 4; ++d)
      ref.push_back(reference[bad][1 + d].item<int64_t>());
    std::string mine_shape, ref_shape;
    for (auto d : t.sizes())
      mine_shape += (mine_shape.empty() ? "" : "x") + std::to_string(d);
    for (auto d : ref)
      ref_shape += (ref_shape.empty() ? "" : "x") + std::to_string(d);
    throw std::invalid_argument(group.describe() + ": the ranks' models differ at parameter '" +
                                name + "': " + mine_shape + " here, " + ref_shape +
                                " on rank 0 (or on another rank)");
  }
}

}  // namespace dtrain::parallel
