// quantize_grouped's AVX2 kernel: eight values at a time through the very operations of
// the SSE2 loop in scan.cpp (compare, select, divide, clamp, round by adding 2^23), so the
// codes are the same bit for bit. Compiled for AVX2 by a function attribute, whatever the
// build's flags; scan.cpp calls it only where the CPU reports AVX2.
#include "dtrain/compress/codecs.h"

#if DTRAIN_AVX2_KERNELS
#include <immintrin.h>

namespace dtrain::compress {

__attribute__((target("avx2"))) int64_t quantize_grouped_avx2(const float* x, int64_t count,
                                                              const float* thresholds,
                                                              int n_thresholds, const float* lo,
                                                              const float* step, int level_bits,
                                                              int max_level, uint16_t* codes) {
  // The groups' constants, broadcast once per call instead of once per vector.
  __m256 threshold[kMaxInlineThresholds], group_lo[kMaxInlineThresholds + 1],
      group_step[kMaxInlineThresholds + 1];
  __m256i group_code[kMaxInlineThresholds + 1];
  for (int g = 0; g <= n_thresholds; ++g) {
    if (g < n_thresholds) threshold[g] = _mm256_set1_ps(thresholds[g]);
    group_lo[g] = _mm256_set1_ps(lo[g]);
    group_step[g] = _mm256_set1_ps(step[g]);
    group_code[g] = _mm256_set1_epi32(g << level_bits);
  }
  const __m256 top = _mm256_set1_ps(static_cast<float>(max_level));
  const __m256 zero = _mm256_setzero_ps();
  const __m256 one = _mm256_set1_ps(1.f);
  const __m256 magic = _mm256_set1_ps(8388608.f);
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    __m256 v_lo = group_lo[0], v_step = group_step[0];
    __m256 v_code = _mm256_castsi256_ps(group_code[0]);
    for (int j = 0; j < n_thresholds; ++j) {
      const __m256 above = _mm256_cmp_ps(v, threshold[j], _CMP_GE_OQ);
      v_lo = _mm256_blendv_ps(v_lo, group_lo[j + 1], above);
      v_step = _mm256_blendv_ps(v_step, group_step[j + 1], above);
      v_code = _mm256_blendv_ps(v_code, _mm256_castsi256_ps(group_code[j + 1]), above);
    }
    const __m256 live = _mm256_cmp_ps(v_step, zero, _CMP_GT_OQ);
    const __m256 s = _mm256_blendv_ps(one, v_step, live);
    __m256 q = _mm256_div_ps(_mm256_sub_ps(v, v_lo), s);
    q = _mm256_min_ps(_mm256_max_ps(q, zero), top);
    const __m256 r = _mm256_and_ps(live, _mm256_sub_ps(_mm256_add_ps(q, magic), magic));
    const __m256i code = _mm256_or_si256(_mm256_castps_si256(v_code), _mm256_cvttps_epi32(r));
    // Codes are below 2^16: pack to 16 bits (per 128-bit lane), then gather the lanes' low
    // halves into one 128-bit store.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(code, code), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + i), _mm256_castsi256_si128(packed));
  }
  return i;
}

}  // namespace dtrain::compress
#endif
