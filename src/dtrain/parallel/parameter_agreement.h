// Whether every rank holds the same model: the count and shapes of the parameters, checked
// collectively before DDP copies rank 0's values (a mismatch would otherwise show as wrong
// data or a hang in the first all-reduce).
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <utility>
#include <vector>

namespace dtrain::comm {
class Group;
}

namespace dtrain::parallel {

// Collective. Throws std::invalid_argument on every rank when the ranks' parameter lists
// differ, naming the first differing parameter with its shape here and on rank 0.
void check_same_parameters(comm::Group& group,
                           const std::vector<std::pair<std::string, at::Tensor>>& named);

}  // namespace dtrain::parallel
