// Helpers of the ops tests' f16/bf16 cases: each op runs in a 16-bit dtype and
// is compared with the same op in f32 on the same inputs (the 16-bit values,
// widened exactly), within a tolerance that fits the dtype.
#pragma once

#include <random>

#include "ht/ops/cast.h"
#include "test_util.h"

namespace ht::test {

inline constexpr DType kHalfDtypes[] = {DType::kF16, DType::kBF16};

/// Tolerance (relative to each value and to the output's scale, as all_close)
/// of a 16-bit result against f32 on the same inputs: a few roundings of the
/// result, which are 2^-11 = 4.9e-4 relative in f16 and 2^-8 = 3.9e-3 in bf16
/// at worst.
inline double half_rtol(DType dtype) { return dtype == DType::kF16 ? 2e-3 : 1e-2; }

/// A new tensor of `dtype` on t's device holding t's values (rounded to nearest even).
inline Tensor cast_to(const Tensor& t, DType dtype) {
  Tensor r = Tensor::empty(t.shape(), dtype, t.device());
  ops::cast(t, r);
  return r;
}

/// A 16-bit tensor and its exact f32 widening: the inputs of one comparison.
struct HalfPair {
  Tensor half;
  Tensor f32;
};

/// Random values in [lo, hi) rounded to `dtype`, with their f32 twin.
inline HalfPair random_half(const Shape& shape, DType dtype, std::mt19937& rng, float lo = -1.f, float hi = 1.f) {
  HalfPair p;
  p.half = cast_to(random_tensor(shape, rng, lo, hi), dtype);
  p.f32 = cast_to(p.half, DType::kF32);
  return p;
}

/// An output of `dtype` filled with NaN: the op must overwrite it.
inline Tensor nan_half(const Shape& shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  t.fill_(NAN);
  return t;
}

/// Passes when the 16-bit `got` has dtype `dtype` and lies within half_rtol of the f32 `want`.
inline ::testing::AssertionResult half_close(const Tensor& got, const Tensor& want, DType dtype) {
  if (got.dtype() != dtype)
    return ::testing::AssertionFailure() << "dtype is " << dtype_name(got.dtype()) << ", want " << dtype_name(dtype);
  return all_close(got.to_vector<float>(), to_double(want), half_rtol(dtype));
}

/// Passes when `got` holds exactly `want` rounded once to got's dtype: the
/// contract of element-wise ops (f32 arithmetic, one rounding per element).
inline ::testing::AssertionResult rounded_once(const Tensor& got, const Tensor& want) {
  const Tensor rounded = cast_to(want, got.dtype());
  const auto g = got.to_vector<float>(), w = rounded.to_vector<float>();
  if (g.size() != w.size()) return ::testing::AssertionFailure() << "sizes differ";
  for (std::size_t i = 0; i < g.size(); ++i)
    if (!(g[i] == w[i] || (std::isnan(g[i]) && std::isnan(w[i]))))
      return ::testing::AssertionFailure() << "element " << i << ": got " << g[i] << ", want " << w[i]
                                           << " (the f32 result rounded once to " << dtype_name(got.dtype()) << ")";
  return ::testing::AssertionSuccess();
}

}  // namespace ht::test
