#include "dtrain/comm/fused_reduce.h"

#include <ATen/ATen.h>

#include <cstring>

#include "dtrain/base/crc32c.h"

namespace dtrain::comm {
namespace {

#if defined(__x86_64__)
// One lane: dst[i] = dst[i] + src[i] (then / divisor) for `n` floats, each 8 bytes of src and
// of the result fed to its CRC32 register (raw: no inversion).
struct Lane {
  float* dst;
  const float* src;
  uint64_t in = ~0u, out = ~0u;  // crc32c's registers start inverted
};

__attribute__((target("sse4.2"))) inline void add_pair(Lane& l, int64_t i, bool divide,
                                                       float divisor) {
  uint64_t s;
  std::memcpy(&s, l.src + i, 8);
  l.in = __builtin_ia32_crc32di(l.in, s);
  float a = l.dst[i] + l.src[i];
  float b = l.dst[i + 1] + l.src[i + 1];
  if (divide) {
    a = a / divisor;
    b = b / divisor;
  }
  l.dst[i] = a;
  l.dst[i + 1] = b;
  uint64_t d;
  std::memcpy(&d, l.dst + i, 8);
  l.out = __builtin_ia32_crc32di(l.out, d);
}

__attribute__((target("sse4.2"))) void add_tail(Lane& l, int64_t begin, int64_t end, bool divide,
                                                float divisor) {
  int64_t i = begin;
  for (; i + 2 <= end; i += 2)
    add_pair(l, i, divide, divisor);
  if (i < end) {
    uint32_t ri = static_cast<uint32_t>(l.in), ro = static_cast<uint32_t>(l.out);
    uint32_t s;
    std::memcpy(&s, l.src + i, 4);
    ri = __builtin_ia32_crc32si(ri, s);
    float a = l.dst[i] + l.src[i];
    if (divide) a = a / divisor;
    l.dst[i] = a;
    uint32_t d;
    std::memcpy(&d, l.dst + i, 4);
    l.in = ri;
    l.out = __builtin_ia32_crc32si(ro, d);
  }
}

// Three lanes at once (the CRC instruction's latency is three cycles, its throughput one),
// their checksums joined with crc32c_combine.
__attribute__((target("sse4.2"))) ReduceCrcs add_floats_crc(float* dst, const float* src, int64_t n,
                                                            bool divide, float divisor) {
  const int64_t lane = n / 6 * 2;  // floats per lane, even
  Lane a{dst, src}, b{dst + lane, src + lane}, c{dst + 2 * lane, src + 2 * lane};
  for (int64_t i = 0; i < lane; i += 2) {
    add_pair(a, i, divide, divisor);
    add_pair(b, i, divide, divisor);
    add_pair(c, i, divide, divisor);
  }
  add_tail(c, lane, n - 2 * lane, divide, divisor);
  const size_t lane_bytes = static_cast<size_t>(lane) * 4;
  const size_t last_bytes = static_cast<size_t>(n - 2 * lane) * 4;
  const auto join = [&](uint64_t ra, uint64_t rb, uint64_t rc) {
    const uint32_t ab =
        crc32c_combine(~static_cast<uint32_t>(ra), ~static_cast<uint32_t>(rb), lane_bytes);
    return crc32c_combine(ab, ~static_cast<uint32_t>(rc), last_bytes);
  };
  return {join(a.in, b.in, c.in), join(a.out, b.out, c.out)};
}
#endif

}  // namespace

ReduceCrcs combine_with_crcs(at::Tensor& dst, const at::Tensor& src, ReduceOp op,
                             int finalize_world, Crc32cKernel kernel) {
  require_crc32c_kernel(kernel);
  const bool fused = kernel != Crc32cKernel::kTables && dst.scalar_type() == at::kFloat &&
                     src.scalar_type() == at::kFloat && dst.is_contiguous() &&
                     src.is_contiguous() && dst.numel() == src.numel() &&
                     (op == ReduceOp::kSum || op == ReduceOp::kAvg);
#if defined(__x86_64__)
  if (fused) {
    const bool divide = op == ReduceOp::kAvg && finalize_world > 1;
    const auto divisor = static_cast<float>(finalize_world);
    float* const d = dst.data_ptr<float>();
    const float* const s = src.data_ptr<float>();
    const int64_t n = dst.numel();
    if (kernel == Crc32cKernel::kCarrylessFold && n >= 64) {
      const detail::FoldedSums bulk = detail::add_floats_fold(d, s, n, divide, divisor);
      Lane rest{d, s, bulk.in, bulk.out};
      add_tail(rest, bulk.done, n, divide, divisor);
      return {~static_cast<uint32_t>(rest.in), ~static_cast<uint32_t>(rest.out)};
    }
    return add_floats_crc(d, s, n, divide, divisor);
  }
#endif
  ReduceCrcs crcs;
  crcs.in =
      crc32c_with(kernel, src.data_ptr(), static_cast<size_t>(src.numel() * src.element_size()));
  combine_into(dst, src, op);
  if (finalize_world > 0) finalize_reduction(dst, op, finalize_world);
  crcs.out =
      crc32c_with(kernel, dst.data_ptr(), static_cast<size_t>(dst.numel() * dst.element_size()));
  return crcs;
}

}  // namespace dtrain::comm
