// SiLU and SwiGLU against double-precision references; backward against
// the analytic derivative and central finite differences; aliasing, extreme
// inputs, 16-bit dtypes and argument errors.
#include "ht/ops/silu.h"

#include <gtest/gtest.h>

#include <cmath>

#include "half_util.h"
#include "test_util.h"

namespace ht::ops::silu_test {
namespace {

using test::all_close;
using test::finite_diff_grad;
using test::random_tensor;
using test::throws_error;

double silu_ref(double x) { return x / (1.0 + std::exp(-x)); }

std::vector<double> swiglu_ref(const std::vector<double>& gu, std::int64_t rows, std::int64_t f) {
  std::vector<double> out(std::size_t(rows * f));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t j = 0; j < f; ++j)
      out[std::size_t(r * f + j)] = silu_ref(gu[std::size_t(r * 2 * f + j)]) * gu[std::size_t(r * 2 * f + f + j)];
  return out;
}

TEST(Silu, ForwardAndBackwardMatchDoubleReference) {
  std::mt19937 rng(71);
  for (std::int64_t n : {0, 1, 7, 1000, 40009}) {  // 40009: several blocks of 16K
    SCOPED_TRACE(::testing::Message() << "n " << n);
    Tensor x = random_tensor({n}, rng, -12.f, 12.f), dy = random_tensor({n}, rng);
    Tensor y = test::nan_tensor({n}), dx = test::nan_tensor({n});
    silu_forward(x, y);
    silu_backward(x, dy, dx);
    const auto vx = test::to_double(x), vdy = test::to_double(dy);
    std::vector<double> want_y(vx.size()), want_dx(vx.size());
    for (std::size_t i = 0; i < vx.size(); ++i) {
      const double s = 1.0 / (1.0 + std::exp(-vx[i]));
      want_y[i] = vx[i] * s;
      want_dx[i] = vdy[i] * s * (1.0 + vx[i] * (1.0 - s));
    }
    // Relative to each element, not only to the output's scale: silu is small
    // for negative x and must stay accurate there.
    const auto vy = y.to_vector<float>(), vdx = dx.to_vector<float>();
    for (std::size_t i = 0; i < vx.size(); ++i) {
      ASSERT_NEAR(vy[i], want_y[i], 4e-7 * std::abs(want_y[i]) + 1e-30) << "y at " << i << ", x " << vx[i];
      ASSERT_NEAR(vdx[i], want_dx[i], 1e-6 * std::abs(vdy[i]) + 1e-30) << "dx at " << i << ", x " << vx[i];
    }
  }
}

TEST(Silu, ExtremeInputs) {
  // Large negative x: silu -> -0 or a tiny negative; large positive: x; no NaN.
  Tensor x = Tensor::from_vector(std::vector<float>{-200.f, -88.f, -20.f, 0.f, 20.f, 88.f, 200.f, 3e38f}, {8});
  Tensor y = test::nan_tensor({8}), dx = test::nan_tensor({8});
  silu_forward(x, y);
  silu_backward(x, Tensor::from_vector(std::vector<float>(8, 1.f), {8}), dx);
  const auto vy = y.to_vector<float>(), vdx = dx.to_vector<float>();
  for (int i = 0; i < 8; ++i) {
    EXPECT_TRUE(std::isfinite(vy[std::size_t(i)])) << i;
    EXPECT_TRUE(std::isfinite(vdx[std::size_t(i)])) << i;
  }
  EXPECT_NEAR(vy[0], 0.f, 1e-30f);
  EXPECT_EQ(vy[3], 0.f);
  EXPECT_EQ(vy[4], 20.f * float(1.0 / (1.0 + std::exp(-20.0))));
  EXPECT_EQ(vy[6], 200.f);
  EXPECT_EQ(vdx[3], 0.5f);
  EXPECT_EQ(vdx[6], 1.f);
}

TEST(Silu, AliasingAndTheFiniteDifferenceGradient) {
  std::mt19937 rng(72);
  const std::int64_t n = 37;
  Tensor x = random_tensor({n}, rng, -5.f, 5.f), w = random_tensor({n}, rng);
  Tensor y = Tensor::empty({n}, DType::kF32), dx = Tensor::empty({n}, DType::kF32);
  silu_forward(x, y);
  silu_backward(x, w, dx);
  const auto vw = test::to_double(w);
  const auto want = finite_diff_grad(
      [&](const std::vector<double>& xx) {
        double l = 0;
        for (std::size_t i = 0; i < xx.size(); ++i) l += vw[i] * silu_ref(xx[i]);
        return l;
      },
      test::to_double(x));
  EXPECT_TRUE(all_close(dx.to_vector<float>(), want, 1e-5, 1e-7));
  Tensor y2 = x.clone(), dx2 = w.clone();
  silu_forward(y2, y2);
  silu_backward(x, dx2, dx2);
  EXPECT_EQ(y2.to_vector<float>(), y.to_vector<float>());
  EXPECT_EQ(dx2.to_vector<float>(), dx.to_vector<float>());
}

TEST(SwiGlu, ForwardMatchesDoubleReference) {
  std::mt19937 rng(73);
  for (auto [rows, f] : {std::pair<std::int64_t, std::int64_t>{0, 4}, {3, 0}, {1, 1}, {5, 7}, {4, 129}, {2, 1000}}) {
    SCOPED_TRACE(::testing::Message() << rows << "x" << f);
    Tensor gu = random_tensor({rows, 2 * f}, rng, -6.f, 6.f), out = test::nan_tensor({rows, f});
    swiglu_forward(gu, out);
    EXPECT_TRUE(all_close(out.to_vector<float>(), swiglu_ref(test::to_double(gu), rows, f), 1e-6));
  }
  // Leading dimensions are rows too: (B, T, 2F) -> (B, T, F).
  Tensor gu = random_tensor({2, 3, 10}, rng), out = test::nan_tensor({2, 3, 5});
  swiglu_forward(gu, out);
  EXPECT_TRUE(all_close(out.to_vector<float>(), swiglu_ref(test::to_double(gu), 6, 5), 1e-6));
}

TEST(SwiGlu, BackwardMatchesFiniteDifferencesAndMayAlias) {
  std::mt19937 rng(74);
  for (auto [rows, f] : {std::pair<std::int64_t, std::int64_t>{1, 1}, {3, 5}, {2, 17}}) {
    SCOPED_TRACE(::testing::Message() << rows << "x" << f);
    Tensor gu = random_tensor({rows, 2 * f}, rng, -4.f, 4.f), w = random_tensor({rows, f}, rng);
    Tensor dgu = test::nan_tensor({rows, 2 * f});
    swiglu_backward(w, gu, dgu);
    const auto vw = test::to_double(w);
    const auto want = finite_diff_grad(
        [&](const std::vector<double>& g) {
          const auto o = swiglu_ref(g, rows, f);
          double l = 0;
          for (std::size_t i = 0; i < o.size(); ++i) l += vw[i] * o[i];
          return l;
        },
        test::to_double(gu));
    EXPECT_TRUE(all_close(dgu.to_vector<float>(), want, 1e-5, 1e-7));
    Tensor in_place = gu.clone();
    swiglu_backward(w, in_place, in_place);
    EXPECT_EQ(in_place.to_vector<float>(), dgu.to_vector<float>());
  }
}

TEST(SwiGlu, TensorParallelShardsAreIndependent) {
  // Two ranks' [gate_r | up_r] column blocks, each run alone, give the columns
  // of the unsharded op on [gate_0 gate_1 | up_0 up_1].
  std::mt19937 rng(75);
  const std::int64_t rows = 4, f = 6, half = f / 2;
  Tensor gu = random_tensor({rows, 2 * f}, rng), out = Tensor::empty({rows, f}, DType::kF32);
  swiglu_forward(gu, out);
  const auto v = gu.to_vector<float>(), vo = out.to_vector<float>();
  for (std::int64_t r = 0; r < 2; ++r) {
    std::vector<float> shard(std::size_t(rows * 2 * half));
    for (std::int64_t i = 0; i < rows; ++i)
      for (std::int64_t j = 0; j < half; ++j) {
        shard[std::size_t(i * 2 * half + j)] = v[std::size_t(i * 2 * f + r * half + j)];
        shard[std::size_t(i * 2 * half + half + j)] = v[std::size_t(i * 2 * f + f + r * half + j)];
      }
    Tensor part = Tensor::empty({rows, half}, DType::kF32);
    swiglu_forward(Tensor::from_vector(shard, {rows, 2 * half}), part);
    const auto vp = part.to_vector<float>();
    for (std::int64_t i = 0; i < rows; ++i)
      for (std::int64_t j = 0; j < half; ++j)
        EXPECT_EQ(vp[std::size_t(i * half + j)], vo[std::size_t(i * f + r * half + j)]);
  }
}

TEST(SiluSwiGlu, HalfIsTheF32ResultRoundedOnce) {
  std::mt19937 rng(76);
  for (DType dt : test::kHalfDtypes) {
    SCOPED_TRACE(dtype_name(dt));
    const auto x = test::random_half({1001}, dt, rng, -8.f, 8.f), dy = test::random_half({1001}, dt, rng);
    Tensor y16 = test::nan_half({1001}, dt), y32 = test::nan_tensor({1001});
    silu_forward(x.half, y16);
    silu_forward(x.f32, y32);
    EXPECT_TRUE(test::rounded_once(y16, y32));
    Tensor dx16 = test::nan_half({1001}, dt), dx32 = test::nan_tensor({1001});
    silu_backward(x.half, dy.half, dx16);
    silu_backward(x.f32, dy.f32, dx32);
    EXPECT_TRUE(test::rounded_once(dx16, dx32));
    const auto gu = test::random_half({7, 66}, dt, rng, -8.f, 8.f), dout = test::random_half({7, 33}, dt, rng);
    Tensor o16 = test::nan_half({7, 33}, dt), o32 = test::nan_tensor({7, 33});
    swiglu_forward(gu.half, o16);
    swiglu_forward(gu.f32, o32);
    EXPECT_TRUE(test::rounded_once(o16, o32));
    Tensor d16 = gu.half.clone(), d32 = test::nan_tensor({7, 66});
    swiglu_backward(dout.half, d16, d16);  // in place
    swiglu_backward(dout.f32, gu.f32, d32);
    EXPECT_TRUE(test::rounded_once(d16, d32));
  }
}

TEST(SiluSwiGlu, Errors) {
  auto t = [](Shape s, DType d = DType::kF32) { return Tensor::zeros(s, d); };
  Tensor y = t({5});
  EXPECT_TRUE(throws_error([&] { silu_forward(t({6}), y); }, ErrorKind::kShapeMismatch,
                           {"silu_forward", "'y' must have 6 elements", "[5]"}));
  Tensor y16 = t({6}, DType::kF16);
  EXPECT_TRUE(throws_error([&] { silu_forward(t({6}), y16); }, ErrorKind::kDTypeMismatch,
                           {"'y' is f16", "'x' is f32", "ht::ops::cast"}));
  Tensor dx = t({6});
  EXPECT_TRUE(throws_error([&] { silu_backward(t({6}), t({5}), dx); }, ErrorKind::kShapeMismatch,
                           {"silu_backward", "'dy'"}));
  EXPECT_TRUE(throws_error([&] { silu_forward(t({6}, DType::kI32), dx); }, ErrorKind::kDTypeMismatch, {"i32"}));
  Tensor out = t({4, 3});
  EXPECT_TRUE(throws_error([&] { swiglu_forward(t({4, 7}), out); }, ErrorKind::kShapeMismatch,
                           {"swiglu_forward", "gate_up [4, 7]", "even"}));
  EXPECT_TRUE(throws_error([&] { swiglu_forward(t({4, 8}), out); }, ErrorKind::kShapeMismatch,
                           {"'out' must have shape [4, 4]", "got [4, 3]"}));
  Tensor dgu = t({4, 6}), dgu_wrong = t({4, 7});
  EXPECT_TRUE(throws_error([&] { swiglu_backward(t({4, 2}), t({4, 6}), dgu); }, ErrorKind::kShapeMismatch,
                           {"swiglu_backward", "'dout' must have shape [4, 3]"}));
  EXPECT_TRUE(throws_error([&] { swiglu_backward(t({4, 3}), t({4, 6}), dgu_wrong); }, ErrorKind::kShapeMismatch,
                           {"'dgate_up' must have shape [4, 6]"}));
}

}  // namespace
}  // namespace ht::ops::silu_test
