// CRC-32C folded 256 bytes a round with VPCLMULQDQ (crc32c_fold.h). Compiled for AVX-512 by
// function attributes, whatever the build's flags; crc32c.cpp calls it only where the CPU
// has the instructions.
#include "dtrain/base/crc32c_fold.h"

namespace dtrain::crc32c_fold {

Multipliers multipliers(size_t bytes) {
  // A product of reflected operands stands for the true product times x^-1: one power less.
  return {static_cast<uint64_t>(x_power(8 * bytes + 63)) << 32,
          static_cast<uint64_t>(x_power(8 * bytes - 1)) << 32};
}

const Constants& constants() {
  static const Constants c{multipliers(kStride), multipliers(64)};
  return c;
}

#if DTRAIN_CRC32C_FOLD_KERNELS
namespace {

DTRAIN_FOLD_TARGET inline __m512i load(const unsigned char* p) {
  return _mm512_loadu_si512(p);
}

template <bool kCopy>
DTRAIN_FOLD_TARGET uint32_t fold_rounds(uint32_t reg, const unsigned char* p, size_t rounds,
                                        unsigned char* out) {
  const __m512i k = broadcast(constants().round);
  __m512i a0 = with_register(load(p), reg), a1 = load(p + 64), a2 = load(p + 128),
          a3 = load(p + 192);
  if (kCopy) {
    _mm512_storeu_si512(out, load(p));
    _mm512_storeu_si512(out + 64, a1);
    _mm512_storeu_si512(out + 128, a2);
    _mm512_storeu_si512(out + 192, a3);
  }
  for (size_t i = 1; i < rounds; ++i) {
    p += kStride;
    const __m512i d0 = load(p), d1 = load(p + 64), d2 = load(p + 128), d3 = load(p + 192);
    if (kCopy) {
      out += kStride;
      _mm512_storeu_si512(out, d0);
      _mm512_storeu_si512(out + 64, d1);
      _mm512_storeu_si512(out + 128, d2);
      _mm512_storeu_si512(out + 192, d3);
    }
    a0 = fold(a0, k, d0);
    a1 = fold(a1, k, d1);
    a2 = fold(a2, k, d2);
    a3 = fold(a3, k, d3);
  }
  return finish(a0, a1, a2, a3);
}

}  // namespace

uint32_t fold_register(uint32_t reg, const unsigned char* p, size_t n, unsigned char* out,
                       size_t* done) {
  const size_t rounds = n / kStride;
  *done = rounds * kStride;
  return out ? fold_rounds<true>(reg, p, rounds, out) : fold_rounds<false>(reg, p, rounds, out);
}

bool supported() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("vpclmulqdq") && __builtin_cpu_supports("sse4.2");
  return has;
}
#else
uint32_t fold_register(uint32_t reg, const unsigned char*, size_t, unsigned char*, size_t* done) {
  *done = 0;
  return reg;
}

bool supported() {
  return false;
}
#endif

}  // namespace dtrain::crc32c_fold
