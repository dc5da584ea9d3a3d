// combine_with_crcs' float32 sum with the checksums folded by VPCLMULQDQ (base/crc32c_fold.h):
// 64 bytes of the input and of the result a step, each into its own four accumulators, in
// the pass that adds them. Compiled for AVX-512 by function attributes, whatever the build's
// flags; fused_reduce.cpp calls it only where the CPU has the instructions. The sums are
// IEEE additions (and divisions) lane by lane: the scalar loop's values, bit for bit.
#include "dtrain/base/crc32c_fold.h"
#include "dtrain/comm/fused_reduce.h"

namespace dtrain::comm::detail {

#if DTRAIN_CRC32C_FOLD_KERNELS
namespace {

struct Step {
  __m512i in, out;
};

DTRAIN_FOLD_TARGET inline Step add16(float* dst, const float* src, bool divide, __m512 divisor) {
  const __m512 s = _mm512_loadu_ps(src);
  __m512 sum = _mm512_add_ps(_mm512_loadu_ps(dst), s);
  if (divide) sum = _mm512_div_ps(sum, divisor);
  _mm512_storeu_ps(dst, sum);
  return {_mm512_castps_si512(s), _mm512_castps_si512(sum)};
}

}  // namespace

DTRAIN_FOLD_TARGET FoldedSums add_floats_fold(float* dst, const float* src, int64_t n, bool divide,
                                              float divisor) {
  constexpr int64_t kFloats = crc32c_fold::kStride / sizeof(float);
  const __m512i k = crc32c_fold::broadcast(crc32c_fold::constants().round);
  const __m512 by = _mm512_set1_ps(divisor);
  const int64_t done = n / kFloats * kFloats;
  Step s[4];
  for (int j = 0; j < 4; ++j)
    s[j] = add16(dst + 16 * j, src + 16 * j, divide, by);
  // crc32c's registers start at ~0.
  __m512i in0 = crc32c_fold::with_register(s[0].in, ~0u), in1 = s[1].in, in2 = s[2].in,
          in3 = s[3].in;
  __m512i out0 = crc32c_fold::with_register(s[0].out, ~0u), out1 = s[1].out, out2 = s[2].out,
          out3 = s[3].out;
  for (int64_t i = kFloats; i < done; i += kFloats) {
    for (int j = 0; j < 4; ++j)
      s[j] = add16(dst + i + 16 * j, src + i + 16 * j, divide, by);
    in0 = crc32c_fold::fold(in0, k, s[0].in);
    in1 = crc32c_fold::fold(in1, k, s[1].in);
    in2 = crc32c_fold::fold(in2, k, s[2].in);
    in3 = crc32c_fold::fold(in3, k, s[3].in);
    out0 = crc32c_fold::fold(out0, k, s[0].out);
    out1 = crc32c_fold::fold(out1, k, s[1].out);
    out2 = crc32c_fold::fold(out2, k, s[2].out);
    out3 = crc32c_fold::fold(out3, k, s[3].out);
  }
  return {crc32c_fold::finish(in0, in1, in2, in3), crc32c_fold::finish(out0, out1, out2, out3),
          done};
}
#else
FoldedSums add_floats_fold(float*, const float*, int64_t, bool, float) {
  return {~0u, ~0u, 0};
}
#endif

}  // namespace dtrain::comm::detail
