// The coarse-first split of float32 values (parallel/float_halves.h): both halves join back
// to the very bits, every kind of value included; the upper halves alone are the values
// truncated to bfloat16.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "dtrain/parallel/float_halves.h"

namespace dtrain::parallel {
namespace {

uint32_t bits_of(float v) {
  uint32_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

TEST(FloatHalvesTest, BothHalvesJoinToTheSameBitsAndTheUpperAloneIsTruncatedBfloat16) {
  for (const int64_t count : {0, 1, 2, 7, 1001}) {
    torch::manual_seed(count);
    at::Tensor values = at::randn({count}) * 100;
    const float specials[] = {0.0f,
                              -0.0f,
                              std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity(),
                              std::numeric_limits<float>::quiet_NaN(),
                              std::numeric_limits<float>::denorm_min(),
                              -std::numeric_limits<float>::max()};
    for (int64_t i = 0; i < std::min<int64_t>(count, 7); ++i)
      values[i] = specials[i];
    const at::Tensor upper = upper_halves(values), lower = lower_halves(values);
    EXPECT_EQ(upper.numel(), (count + 1) / 2);
    const at::Tensor exact = join_halves(upper, lower, count);
    const at::Tensor coarse = join_halves(upper, {}, count);
    ASSERT_EQ(exact.numel(), count);
    EXPECT_EQ(std::memcmp(exact.data_ptr<float>(), values.data_ptr<float>(), count * 4), 0);
    for (int64_t i = 0; i < count; ++i) {
      const float v = values[i].item<float>(), c = coarse[i].item<float>();
      EXPECT_EQ(bits_of(c), bits_of(v) & 0xffff0000u) << i;
      if (std::isnormal(v)) {  // subnormals lose their leading bits
        EXPECT_LE(std::abs(c - v), std::abs(v) * std::ldexp(1.0f, -7)) << i;
      }
    }
  }
}

TEST(FloatHalvesTest, HalvesOfAnotherCountOrTypeAreRefused) {
  const at::Tensor values = at::randn({9});
  const at::Tensor upper = upper_halves(values);
  EXPECT_THROW(join_halves(upper, {}, 11), std::invalid_argument);
  EXPECT_THROW(join_halves(upper, lower_halves(values.narrow(0, 0, 7)), 9), std::invalid_argument);
  EXPECT_THROW(upper_halves(values.to(at::kDouble)), std::invalid_argument);
  EXPECT_THROW(upper_halves(values.reshape({3, 3})), std::invalid_argument);
}

}  // namespace
}  // namespace dtrain::parallel
