// The randomized Hadamard rotation of the rot codecs: each tile of T = 2^k values becomes
// y = H D x / sqrt(T), with D a diagonal of random signs (the same for every tile, drawn
// from a seed) and H the Walsh-Hadamard matrix (the fast transform: k passes of sums and
// differences). Orthonormal, so the inverse is x = D H y / sqrt(T) and distances keep:
// quantizing y with error e decodes x with an error of the same size, spread evenly over
// the tile instead of concentrated where x's outliers were.
//
// The CPU kernel and the tensor operations (any device) run the same IEEE operations in
// the same order, so both give the same bits.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace dtrain::compress {

struct Rotation {
  int tile_log2 = 8;
  uint32_t seed = 0;
  int64_t tile() const { return int64_t{1} << tile_log2; }
  // +1 or -1 for each position of a tile (splitmix64 of seed and position).
  std::vector<float> signs() const;
  float scale() const;  // 1 / sqrt(T), as a float
};

// In place over `n` values, n a multiple of the tile, on up to `threads` threads (the
// result does not depend on the count).
void rotate(float* x, int64_t n, const Rotation& r, int threads = 1);
void unrotate(float* x, int64_t n, const Rotation& r, int threads = 1);

// The same on a 1-D float32 tensor whose size is a multiple of the tile (a new tensor).
at::Tensor rotate(const at::Tensor& x, const Rotation& r);
at::Tensor unrotate(const at::Tensor& x, const Rotation& r);

}  // namespace dtrain::compress
