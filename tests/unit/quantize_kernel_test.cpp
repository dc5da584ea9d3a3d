// The group quantizer's vector kernels (SSE2 in scan.cpp, AVX2 in scan_avx2.cpp) against
// the scalar rule in codecs.h, code for code: values on thresholds, halfway between levels
// (ties round to even), outside the range (clamped), groups with step 0, every count of
// thresholds the kernels take.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "dtrain/compress/codecs.h"

namespace dtrain::compress {
namespace {

struct Groups {
  std::vector<float> thresholds, lo, step;
  int level_bits, max_level;
};

Groups make_groups(int n_thresholds, int level_bits, std::mt19937& gen) {
  Groups g;
  g.level_bits = level_bits;
  g.max_level = (1 << level_bits) - 1;
  std::uniform_real_distribution<float> width(0.1f, 2.f);
  float edge = -3.f;
  for (int k = 0; k <= n_thresholds; ++k) {
    const float hi = edge + width(gen);
    g.lo.push_back(edge);
    // Every fifth group holds one value only: step 0, coded as level 0.
    g.step.push_back(k % 5 == 3 ? 0.f : level_step(edge, hi, g.max_level + 1));
    edge = hi + 0.25f;
    if (k < n_thresholds) g.thresholds.push_back(edge);
  }
  return g;
}

std::vector<float> inputs(const Groups& g, std::mt19937& gen) {
  std::vector<float> x;
  std::uniform_real_distribution<float> anywhere(-4.f, g.thresholds.empty() ? 4.f : 40.f);
  for (int i = 0; i < 3001; ++i)  // odd: the kernels leave a tail to the scalar loop
    x.push_back(anywhere(gen));
  for (size_t k = 0; k < g.lo.size(); ++k) {
    x.push_back(g.lo[k]);
    for (int level = 0; level < 3; ++level)  // exactly halfway between two levels
      x.push_back(g.lo[k] + (static_cast<float>(level) + 0.5f) * g.step[k]);
  }
  for (const float t : g.thresholds) {
    x.push_back(t);
    x.push_back(std::nextafter(t, -1e9f));
  }
  return x;
}

std::vector<uint16_t> scalar_codes(const std::vector<float>& x, const Groups& g) {
  std::vector<uint16_t> codes;
  for (const float v : x) {
    int group = 0;
    for (const float t : g.thresholds)
      group += v >= t;
    codes.push_back(static_cast<uint16_t>(
        (group << g.level_bits) | quantize(v, g.lo[static_cast<size_t>(group)],
                                           g.step[static_cast<size_t>(group)], g.max_level)));
  }
  return codes;
}

TEST(QuantizeKernelTest, VectorKernelsGiveTheScalarRulesCodes) {
  std::mt19937 gen(11);
  for (int n_thresholds = 0; n_thresholds <= kMaxInlineThresholds; ++n_thresholds) {
    const int level_bits = n_thresholds == 0 ? 8 : 16 - (n_thresholds < 4 ? 2 : 4);
    const Groups g = make_groups(n_thresholds, level_bits, gen);
    const std::vector<float> x = inputs(g, gen);
    const std::vector<uint16_t> want = scalar_codes(x, g);
    const auto n = static_cast<int64_t>(x.size());
    std::vector<uint16_t> got(x.size());
    quantize_grouped(x.data(), n, g.thresholds.data(), n_thresholds, g.lo.data(), g.step.data(),
                     g.level_bits, g.max_level, got.data());
    EXPECT_EQ(got, want) << n_thresholds << " thresholds, dispatched kernel";
#if DTRAIN_AVX2_KERNELS
    if (!__builtin_cpu_supports("avx2")) continue;
    std::vector<uint16_t> avx2(x.size());
    const int64_t done =
        quantize_grouped_avx2(x.data(), n, g.thresholds.data(), n_thresholds, g.lo.data(),
                              g.step.data(), g.level_bits, g.max_level, avx2.data());
    ASSERT_EQ(done, n / 8 * 8);
    avx2.resize(static_cast<size_t>(done));
    EXPECT_EQ(avx2, std::vector<uint16_t>(want.begin(), want.begin() + done))
        << n_thresholds << " thresholds, AVX2 kernel";
#endif
  }
}

}  // namespace
}  // namespace dtrain::compress
