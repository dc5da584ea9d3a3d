#include "dtrain/parallel/float_halves.h"

#include <ATen/ATen.h>

#include <cstring>
#include <stdexcept>
#include <string>

namespace dtrain::parallel {
namespace {

at::Tensor half(const at::Tensor& values, int shift) {
  if (values.scalar_type() != at::kFloat || values.dim() != 1 || !values.is_contiguous())
    throw std::invalid_argument("float halves: one contiguous dimension of float32 expected");
  const int64_t n = values.numel();
  at::Tensor out = at::zeros({half_values(n)}, at::kFloat);
  const auto* in = values.data_ptr<float>();
  auto* halves = reinterpret_cast<uint16_t*>(out.data_ptr<float>());
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, in + i, sizeof bits);
    halves[i] = static_cast<uint16_t>(bits >> shift);
  }
  return out;
}

const uint16_t* halves_of(const at::Tensor& part, int64_t count, const char* which) {
  if (part.scalar_type() != at::kFloat || part.numel() != half_values(count) ||
      !part.is_contiguous())
    throw std::invalid_argument(std::string("float halves: the ") + which + " halves of " +
                                std::to_string(count) + " values should be " +
                                std::to_string(half_values(count)) + " float32, not " +
                                std::to_string(part.numel()));
  return reinterpret_cast<const uint16_t*>(part.data_ptr<float>());
}

}  // namespace

int64_t half_values(int64_t count) {
  return (count + 1) / 2;
}

at::Tensor upper_halves(const at::Tensor& values) {
  return half(values, 16);
}

at::Tensor lower_halves(const at::Tensor& values) {
  return half(values, 0);
}

at::Tensor join_halves(const at::Tensor& upper, const at::Tensor& lower, int64_t count) {
  const uint16_t* hi = halves_of(upper, count, "upper");
  const uint16_t* lo = lower.defined() ? halves_of(lower, count, "lower") : nullptr;
  at::Tensor out = at::empty({count}, at::kFloat);
  auto* values = out.data_ptr<float>();
  for (int64_t i = 0; i < count; ++i) {
    const uint32_t bits = (uint32_t{hi[i]} << 16) | (lo ? lo[i] : 0u);
    std::memcpy(values + i, &bits, sizeof bits);
  }
  return out;
}

}  // namespace dtrain::parallel
