// Internal: how collective algorithms cut a flat buffer into per-rank blocks and segments.
// Every rank computes the same boundaries from (count, parts), so sizes never travel.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace dtrain::comm {

// Part i of n elements split into `parts` nearly equal pieces: [begin(i), begin(i+1)).
struct BlockLayout {
  int64_t count;
  int64_t parts;
  int64_t begin(int64_t i) const { return i * count / parts; }
  int64_t size(int64_t i) const { return begin(i + 1) - begin(i); }
  int64_t max_size() const { return parts == 0 ? 0 : (count + parts - 1) / parts; }
};

inline at::Tensor slice(const at::Tensor& flat, int64_t begin, int64_t length) {
  return flat.narrow(0, begin, length);
}

inline int wrap(int64_t i, int p) {
  return static_cast<int>(((i % p) + p) % p);
}

}  // namespace dtrain::comm
