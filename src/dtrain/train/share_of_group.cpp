#include "dtrain/train/share_of_group.h"

#include <ATen/ATen.h>

#include "dtrain/comm/allreduce.h"
#include "dtrain/comm/group.h"

namespace dtrain::train {

int ShareOfGroup::rank() const {
  return group_ ? group_->rank() : 0;
}

int ShareOfGroup::world() const {
  return group_ ? group_->size() : 1;
}

void ShareOfGroup::sum_over_ranks(std::vector<double>& values) {
  if (!group_) return;
  // dtrain's ring, not sum_over_group's native all-reduce: a watcher's Group::abort ends its
  // waits when a member goes during the evaluation (native collectives are not abortable).
  at::Tensor t = at::tensor(values, at::kDouble);
  comm::AllReduceOptions o;
  o.algorithm = comm::Algorithm::kRing;
  comm::all_reduce(*group_, t, o);
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = t[static_cast<int64_t>(i)].item<double>();
}

}  // namespace dtrain::train
