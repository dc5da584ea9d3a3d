// Shared per-value loops of the codecs, written so the compiler vectorizes them with
// plain SSE2 (no -ffast-math): fixed-width lanes, selects instead of branches.
#include <algorithm>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#include <cstring>
#include <limits>
#include <stdexcept>
#include <vector>

#include "dtrain/compress/bitpack.h"
#include "dtrain/compress/chunks.h"
#include "dtrain/compress/codecs.h"
#include "dtrain/compress/selection.h"

namespace dtrain::compress {
namespace {
constexpr uint32_t kExponent = 0x7F800000u;
}  // namespace

void throw_non_finite() {
  throw std::invalid_argument("encode: input contains NaN or Inf; codecs take finite values only");
}

void require_finite(const float* x, int64_t n) {
  uint32_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, x + i, 4);
    bad |= static_cast<uint32_t>((u & kExponent) == kExponent);
  }
  if (bad) throw_non_finite();
}

// Min and max through integer keys: for IEEE floats, flipping the magnitude bits of the
// negatives makes the bit patterns order like the values when read as int32, and integer
// min/max reductions vectorize where float ones (NaN rules) do not.
namespace {

ValueRange finite_range_of(const float* x, int64_t n) {
  if (n == 0) return {0.f, 0.f};
  int32_t kmin = std::numeric_limits<int32_t>::max();
  int32_t kmax = std::numeric_limits<int32_t>::min();
  uint32_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    int32_t s;
    std::memcpy(&s, x + i, 4);
    bad |= static_cast<uint32_t>((static_cast<uint32_t>(s) & kExponent) == kExponent);
    const int32_t key = s ^ ((s >> 31) & 0x7FFFFFFF);
    kmin = key < kmin ? key : kmin;
    kmax = key > kmax ? key : kmax;
  }
  if (bad) throw_non_finite();
  auto value = [](int32_t key) {
    const int32_t s = key ^ ((key >> 31) & 0x7FFFFFFF);
    float v;
    std::memcpy(&v, &s, 4);
    return v;
  };
  return {value(kmin), value(kmax)};
}

}  // namespace

ValueRange finite_range(const float* x, int64_t n, int chunks) {
  std::vector<ValueRange> part(static_cast<size_t>(chunks));
  for_each_chunk(n, chunks, [&](const Chunk& c) {
    part[static_cast<size_t>(c.index)] = finite_range_of(x + c.begin, c.end - c.begin);
  });
  // Merged in key order, as each chunk's were found: std::min would keep whichever of -0
  // and +0 came first, and the packet would then depend on the thread count.
  ValueRange range = part[0];
  for (const ValueRange& p : part) {  // every chunk holds values: chunks cover [0, n)
    if (order_key(p.lo) < order_key(range.lo)) range.lo = p.lo;
    if (order_key(p.hi) > order_key(range.hi)) range.hi = p.hi;
  }
  return range;
}

void decode_by_table(const uint8_t* payload, int64_t n, int bits, const float* value_of_code,
                     float* out, int chunks) {
  for_each_block(n, chunks, [&](int64_t start, int64_t count) {
    uint16_t codes[kCodeBlock];
    unpack_bits(payload, count, bits, codes, start);
    for (int64_t i = 0; i < count; ++i)
      out[start + i] = value_of_code[codes[i]];
  });
}

void quantize_grouped(const float* x, int64_t count, const float* thresholds, int n_thresholds,
                      const float* lo, const float* step, int level_bits, int max_level,
                      uint16_t* codes) {
  int64_t i = 0;
#if DTRAIN_AVX2_KERNELS
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) {
    i = quantize_grouped_avx2(x, count, thresholds, n_thresholds, lo, step, level_bits, max_level,
                              codes);
  }
#endif
#ifdef __SSE2__
  const __m128 top = _mm_set1_ps(static_cast<float>(max_level));
  const __m128 zero = _mm_setzero_ps();
  const __m128 one = _mm_set1_ps(1.f);
  const __m128 magic = _mm_set1_ps(8388608.f);
  for (; i + 4 <= count; i += 4) {
    const __m128 v = _mm_loadu_ps(x + i);
    __m128 g_lo = _mm_set1_ps(lo[0]);
    __m128 g_step = _mm_set1_ps(step[0]);
    __m128i g_code = _mm_setzero_si128();
    for (int j = 0; j < n_thresholds; ++j) {
      const __m128 above = _mm_cmpge_ps(v, _mm_set1_ps(thresholds[j]));
      g_lo = _mm_or_ps(_mm_and_ps(above, _mm_set1_ps(lo[j + 1])), _mm_andnot_ps(above, g_lo));
      g_step = _mm_or_ps(_mm_and_ps(above, _mm_set1_ps(step[j + 1])), _mm_andnot_ps(above, g_step));
      const __m128i code = _mm_set1_epi32((j + 1) << level_bits);
      const __m128i above_i = _mm_castps_si128(above);
      g_code = _mm_or_si128(_mm_and_si128(above_i, code), _mm_andnot_si128(above_i, g_code));
    }
    const __m128 live = _mm_cmpgt_ps(g_step, zero);
    const __m128 s = _mm_or_ps(_mm_and_ps(live, g_step), _mm_andnot_ps(live, one));
    __m128 q = _mm_div_ps(_mm_sub_ps(v, g_lo), s);
    q = _mm_min_ps(_mm_max_ps(q, zero), top);
    const __m128 r = _mm_and_ps(live, _mm_sub_ps(_mm_add_ps(q, magic), magic));
    const __m128i code = _mm_or_si128(g_code, _mm_cvttps_epi32(r));
    alignas(16) int32_t out[4];
    _mm_store_si128(reinterpret_cast<__m128i*>(out), code);
    for (int k = 0; k < 4; ++k)
      codes[i + k] = static_cast<uint16_t>(out[k]);
  }
#endif
  for (; i < count; ++i) {
    int g = 0;
    for (int j = 0; j < n_thresholds; ++j)
      g += x[i] >= thresholds[j];
    codes[i] = static_cast<uint16_t>((g << level_bits) | quantize(x[i], lo[g], step[g], max_level));
  }
}

}  // namespace dtrain::compress
