#include "dtrain/parallel/bucket_assignment.h"

#include <stdexcept>

namespace dtrain::parallel {

std::vector<std::vector<size_t>> assign_buckets(const std::vector<int64_t>& bytes,
                                                const std::vector<bool>& needs_grad,
                                                int64_t first_cap_bytes, int64_t cap_bytes) {
  if (first_cap_bytes <= 0 || cap_bytes <= 0)
    throw std::invalid_argument("bucket caps must be positive");
  if (bytes.size() != needs_grad.size())
    throw std::invalid_argument("assign_buckets: a size and a flag per parameter");
  std::vector<std::vector<size_t>> buckets;
  int64_t open_bytes = 0;
  bool open = false;
  for (size_t k = bytes.size(); k-- > 0;) {
    if (!needs_grad[k]) continue;
    if (!open) {
      buckets.emplace_back();
      open = true;
      open_bytes = 0;
    }
    buckets.back().push_back(k);
    open_bytes += bytes[k];
    if (open_bytes >= (buckets.size() == 1 ? first_cap_bytes : cap_bytes)) open = false;
  }
  return buckets;
}

}  // namespace dtrain::parallel
