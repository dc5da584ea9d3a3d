// Which parameters share a DDP gradient bucket: a pure function of the parameters' sizes,
// as PyTorch's compute_bucket_assignment_by_size. Parameters go in reverse registration
// order (the order backward produces their gradients); a bucket closes once its bytes reach
// its cap, the parameter that crosses it staying in, so a large layer near the output starts
// its reduction before the layers below it run backward. The first bucket has a cap of its
// own (small: the first reduction starts early).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dtrain::parallel {

// bytes[k]: parameter k's gradient bytes; needs_grad[k]: whether it has a gradient (those
// without stay out of every bucket). Returns, per bucket in reduction order, its parameters'
// indices in the order their gradients lie in it. Throws std::invalid_argument on caps that
// are not positive or on sizes of different lengths.
std::vector<std::vector<size_t>> assign_buckets(const std::vector<int64_t>& bytes,
                                                const std::vector<bool>& needs_grad,
                                                int64_t first_cap_bytes, int64_t cap_bytes);

}  // namespace dtrain::parallel
