#include "dtrain/compress/hadamard.h"

#include <ATen/ATen.h>

#include <cmath>
#include <functional>

#include "dtrain/compress/chunks.h"
#include "dtrain/compress/codecs.h"

namespace dtrain::compress {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The fast Walsh-Hadamard transform of one tile, unnormalized: pass h pairs each value with
// the one h after it within blocks of 2h (a + b, a - b). The first three passes run in
// registers on groups of 8 (the same sums in the same order), the rest as loops the
// compiler vectorizes.
void transform(float* x, int64_t tile) {
  int64_t h = 1;
  if (tile >= 8) {
    for (int64_t g = 0; g < tile; g += 8) {
      float* v = x + g;
      const float a0 = v[0] + v[1], a1 = v[0] - v[1], a2 = v[2] + v[3], a3 = v[2] - v[3];
      const float a4 = v[4] + v[5], a5 = v[4] - v[5], a6 = v[6] + v[7], a7 = v[6] - v[7];
      const float b0 = a0 + a2, b2 = a0 - a2, b1 = a1 + a3, b3 = a1 - a3;
      const float b4 = a4 + a6, b6 = a4 - a6, b5 = a5 + a7, b7 = a5 - a7;
      v[0] = b0 + b4, v[4] = b0 - b4, v[1] = b1 + b5, v[5] = b1 - b5;
      v[2] = b2 + b6, v[6] = b2 - b6, v[3] = b3 + b7, v[7] = b3 - b7;
    }
    h = 8;
  }
  for (; h < tile; h *= 2) {
    for (int64_t block = 0; block < tile; block += 2 * h) {
      float* a = x + block;
      float* b = a + h;
      for (int64_t j = 0; j < h; ++j) {
        const float s = a[j] + b[j], d = a[j] - b[j];
        a[j] = s;
        b[j] = d;
      }
    }
  }
}

// Runs fn(begin, end) over [0, n) split over up to `threads` threads at whole tiles: the
// chunks start on multiples of kCodeBlock values, which whole tiles of up to kCodeBlock
// values divide; larger tiles run on one thread.
void for_each_tile_range(int64_t n, int64_t tile, int threads,
                         const std::function<void(int64_t, int64_t)>& fn) {
  const int chunks = tile <= kCodeBlock ? chunk_count(n, threads, kMinEncodeChunk) : 1;
  for_each_chunk(n, chunks, [&](const Chunk& c) { fn(c.begin, c.end); });
}

at::Tensor transform(at::Tensor x, int64_t tile) {
  const int64_t tiles = x.numel() / tile;
  for (int64_t h = 1; h < tile; h *= 2) {
    const at::Tensor v = x.view({tiles, tile / (2 * h), 2, h});
    const at::Tensor a = v.select(2, 0), b = v.select(2, 1);
    x = at::stack({a + b, a - b}, 2).view({-1});
  }
  return x;
}

}  // namespace

std::vector<float> Rotation::signs() const {
  std::vector<float> out(static_cast<size_t>(tile()));
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = (splitmix64((static_cast<uint64_t>(seed) << 32) ^ i) >> 63) ? -1.f : 1.f;
  return out;
}

float Rotation::scale() const {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(tile())));
}

void rotate(float* x, int64_t n, const Rotation& r, int threads) {
  const int64_t tile = r.tile();
  const std::vector<float> signs = r.signs();
  const float scale = r.scale();
  for_each_tile_range(n, tile, threads, [&](int64_t from, int64_t to) {
    for (int64_t begin = from; begin < to; begin += tile) {
      float* t = x + begin;
      for (int64_t i = 0; i < tile; ++i)
        t[i] *= signs[static_cast<size_t>(i)];
      transform(t, tile);
      for (int64_t i = 0; i < tile; ++i)
        t[i] *= scale;
    }
  });
}

void unrotate(float* x, int64_t n, const Rotation& r, int threads) {
  const int64_t tile = r.tile();
  const std::vector<float> signs = r.signs();
  const float scale = r.scale();
  for_each_tile_range(n, tile, threads, [&](int64_t from, int64_t to) {
    for (int64_t begin = from; begin < to; begin += tile) {
      float* t = x + begin;
      transform(t, tile);
      for (int64_t i = 0; i < tile; ++i)
        t[i] = t[i] * scale * signs[static_cast<size_t>(i)];
    }
  });
}

namespace {
at::Tensor on_device(const std::vector<float>& v, const at::Tensor& like) {
  return at::tensor(v, at::TensorOptions().dtype(at::kFloat)).to(like.device());
}
}  // namespace

at::Tensor rotate(const at::Tensor& x, const Rotation& r) {
  const int64_t tile = r.tile();
  const at::Tensor signs = on_device(r.signs(), x);
  const at::Tensor scale = on_device({r.scale()}, x);
  const at::Tensor signed_x = (x.view({-1, tile}) * signs).view({-1});
  return transform(signed_x, tile) * scale;
}

at::Tensor unrotate(const at::Tensor& x, const Rotation& r) {
  const int64_t tile = r.tile();
  const at::Tensor signs = on_device(r.signs(), x);
  const at::Tensor scale = on_device({r.scale()}, x);
  return ((transform(x.contiguous(), tile) * scale).view({-1, tile}) * signs).view({-1});
}

}  // namespace dtrain::compress
