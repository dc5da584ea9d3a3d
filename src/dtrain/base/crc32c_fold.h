// CRC-32C by folding (crc32c.h's kCarrylessFold): the bytes are taken 64 at a time into four
// 512-bit accumulators, each multiplied forward by a constant with VPCLMULQDQ (carry-less
// multiplication) and XORed with the data that follows, as in Gopal et al., "Fast CRC
// Computation for Generic Polynomials Using PCLMULQDQ Instruction" (Intel, 2009). Measured
// (`dtrain bench checksum`, docs/results.md): 2.2x the CRC32 instruction in cache and 2.8x
// from memory. Only for x86-64 CPUs with AVX-512 (F, BW) and VPCLMULQDQ; callers check
// crc32c_kernel() first. kCarrylessFold256 (crc32c_fold256.cpp) is the same fold in eight
// 256-bit accumulators, for CPUs with VPCLMULQDQ and AVX2 alone. Internal to crc32c.cpp and
// the kernels fused with it (comm/fused_reduce.h).
//
// The algebra, in the reflected bit order CRC-32C uses (bit 0 of byte 0 is the highest
// power): a 128-bit lane H:L standing for H x^64 + L that must move F bytes further on is
// replaced by H*(x^(64+8F) mod P) + L*(x^(8F) mod P), congruent modulo P and 96 bits long;
// a carry-less product of reflected operands comes out one place short, hence the constants'
// extra x^-1. What remains after the last fold is a 64-byte message that has the same CRC
// register (from zero) as everything folded into it, which eight CRC32 instructions finish.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define DTRAIN_CRC32C_FOLD_KERNELS 1
#include <immintrin.h>
#else
#define DTRAIN_CRC32C_FOLD_KERNELS 0
#endif

namespace dtrain::crc32c_fold {

constexpr size_t kStride = 256;  // bytes a round: four accumulators of 64
constexpr size_t kMinBytes = kStride;

// x^bits modulo the CRC-32C polynomial, reflected (bit 31 is x^0).
uint32_t x_power(uint64_t bits);

// The two multipliers that move a 128-bit lane `bytes` further on, as the 64-bit operands
// the carry-less product takes (the 32-bit remainder in the upper half).
struct Multipliers {
  uint64_t high, low;  // for the lane's first 8 bytes, its last 8
};
Multipliers multipliers(size_t bytes);

// The two distances the kernels use, computed once: a round (kStride bytes, each accumulator
// onto its next data) and one accumulator onto the next (64 bytes, at the end).
struct Constants {
  Multipliers round, join;
};
const Constants& constants();

#if DTRAIN_CRC32C_FOLD_KERNELS
#define DTRAIN_FOLD_TARGET __attribute__((target("avx512f,avx512bw,vpclmulqdq,sse4.2")))

DTRAIN_FOLD_TARGET inline __m512i broadcast(const Multipliers& m) {
  const auto high = static_cast<long long>(m.high), low = static_cast<long long>(m.low);
  return _mm512_set_epi64(low, high, low, high, low, high, low, high);  // each lane: high first
}

// acc moved on by the distance `k` was made for, XORed with `data` (the bytes there).
DTRAIN_FOLD_TARGET inline __m512i fold(__m512i acc, __m512i k, __m512i data) {
  return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(acc, k, 0x00),
                                   _mm512_clmulepi64_epi128(acc, k, 0x11), data, 0x96);
}

// XORs a CRC register into a message's first four bytes: the same register afterwards as
// starting the CRC from it.
DTRAIN_FOLD_TARGET inline __m512i with_register(__m512i first, uint32_t reg) {
  return _mm512_xor_si512(first, _mm512_zextsi128_si512(_mm_cvtsi32_si128(static_cast<int>(reg))));
}

// The CRC register (from zero) of the four accumulators' bytes, in order.
DTRAIN_FOLD_TARGET inline uint32_t finish(__m512i a0, __m512i a1, __m512i a2, __m512i a3) {
  const __m512i k64 = broadcast(constants().join);
  a1 = fold(a0, k64, a1);
  a2 = fold(a1, k64, a2);
  a3 = fold(a2, k64, a3);
  alignas(64) uint64_t words[8];
  _mm512_store_si512(words, a3);
  uint64_t reg = 0;
  for (const uint64_t w : words)
    reg = _mm_crc32_u64(reg, w);
  return static_cast<uint32_t>(reg);
}
#endif

// The CRC register after the first n / kStride * kStride bytes at `p` from register `reg`
// (no inversions), copying them to `out` too when it is not null; sets *done to that count.
// n >= kMinBytes.
uint32_t fold_register(uint32_t reg, const unsigned char* p, size_t n, unsigned char* out,
                       size_t* done);

bool supported();

// fold_register by the 256-bit kernel (crc32c_fold256.cpp), and whether the CPU has it.
uint32_t fold256_register(uint32_t reg, const unsigned char* p, size_t n, unsigned char* out,
                          size_t* done);
bool supported256();

}  // namespace dtrain::crc32c_fold
