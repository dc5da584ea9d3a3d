// CRC-32C folded 256 bytes a round with 256-bit VPCLMULQDQ (crc32c_fold.h's narrow kernel):
// eight 32-byte accumulators in place of four 64-byte ones, the same constants for a round,
// joined 32 bytes apart at the end. For x86-64 CPUs with VPCLMULQDQ and AVX2 but no AVX-512
// (AMD Zen 3, Intel client cores since Alder Lake); compiled for them by function
// attributes, whatever the build's flags, and called only where the CPU has the
// instructions.
#include "dtrain/base/crc32c_fold.h"

namespace dtrain::crc32c_fold {

#if DTRAIN_CRC32C_FOLD_KERNELS
namespace {

#define DTRAIN_FOLD256_TARGET __attribute__((target("avx2,vpclmulqdq,pclmul,sse4.2")))

DTRAIN_FOLD256_TARGET inline __m256i broadcast256(const Multipliers& m) {
  const auto high = static_cast<long long>(m.high), low = static_cast<long long>(m.low);
  return _mm256_set_epi64x(low, high, low, high);  // each 128-bit lane: high first
}

DTRAIN_FOLD256_TARGET inline __m256i load256(const unsigned char* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

DTRAIN_FOLD256_TARGET inline void store256(unsigned char* out, __m256i v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), v);
}

// acc moved on by the distance `k` was made for, XORed with `data` (the bytes there).
DTRAIN_FOLD256_TARGET inline __m256i fold256(__m256i acc, __m256i k, __m256i data) {
  return _mm256_xor_si256(_mm256_xor_si256(_mm256_clmulepi64_epi128(acc, k, 0x00),
                                           _mm256_clmulepi64_epi128(acc, k, 0x11)),
                          data);
}

// Eight accumulators, named, so that they stay in registers (an array of them went to the
// stack: a load and a store a fold).
struct Accumulators {
  __m256i a0, a1, a2, a3, a4, a5, a6, a7;
};

template <bool kCopy>
DTRAIN_FOLD256_TARGET inline __m256i take(const unsigned char* p, unsigned char* out, size_t j) {
  const __m256i d = load256(p + 32 * j);
  if (kCopy) store256(out + 32 * j, d);
  return d;
}

template <bool kCopy>
DTRAIN_FOLD256_TARGET uint32_t fold_rounds256(uint32_t reg, const unsigned char* p, size_t rounds,
                                              unsigned char* out) {
  const __m256i k = broadcast256(constants().round);
  // The register enters as the message's first four bytes XORed with it.
  const __m256i first = _mm256_zextsi128_si256(_mm_cvtsi32_si128(static_cast<int>(reg)));
  Accumulators a{_mm256_xor_si256(take<kCopy>(p, out, 0), first),
                 take<kCopy>(p, out, 1),
                 take<kCopy>(p, out, 2),
                 take<kCopy>(p, out, 3),
                 take<kCopy>(p, out, 4),
                 take<kCopy>(p, out, 5),
                 take<kCopy>(p, out, 6),
                 take<kCopy>(p, out, 7)};
  for (size_t i = 1; i < rounds; ++i) {
    p += kStride;
    if (kCopy) out += kStride;
    a.a0 = fold256(a.a0, k, take<kCopy>(p, out, 0));
    a.a1 = fold256(a.a1, k, take<kCopy>(p, out, 1));
    a.a2 = fold256(a.a2, k, take<kCopy>(p, out, 2));
    a.a3 = fold256(a.a3, k, take<kCopy>(p, out, 3));
    a.a4 = fold256(a.a4, k, take<kCopy>(p, out, 4));
    a.a5 = fold256(a.a5, k, take<kCopy>(p, out, 5));
    a.a6 = fold256(a.a6, k, take<kCopy>(p, out, 6));
    a.a7 = fold256(a.a7, k, take<kCopy>(p, out, 7));
  }
  static const Multipliers join = multipliers(32);
  const __m256i k32 = broadcast256(join);
  __m256i last = fold256(a.a0, k32, a.a1);
  last = fold256(last, k32, a.a2);
  last = fold256(last, k32, a.a3);
  last = fold256(last, k32, a.a4);
  last = fold256(last, k32, a.a5);
  last = fold256(last, k32, a.a6);
  last = fold256(last, k32, a.a7);
  alignas(32) uint64_t words[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(words), last);
  uint64_t crc = 0;
  for (const uint64_t w : words)
    crc = _mm_crc32_u64(crc, w);
  return static_cast<uint32_t>(crc);
}

}  // namespace

uint32_t fold256_register(uint32_t reg, const unsigned char* p, size_t n, unsigned char* out,
                          size_t* done) {
  const size_t rounds = n / kStride;
  *done = rounds * kStride;
  return out ? fold_rounds256<true>(reg, p, rounds, out)
             : fold_rounds256<false>(reg, p, rounds, out);
}

bool supported256() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("vpclmulqdq") &&
                          __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.2");
  return has;
}
#else
uint32_t fold256_register(uint32_t reg, const unsigned char*, size_t, unsigned char*,
                          size_t* done) {
  *done = 0;
  return reg;
}

bool supported256() {
  return false;
}
#endif

}  // namespace dtrain::crc32c_fold
