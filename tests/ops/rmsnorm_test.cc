// RMSNorm forward against a double-precision reference; backward (dx,
// dweight) against central finite differences of that reference; aliasing,
// determinism across thread counts, 16-bit dtypes and argument errors.
#include "ht/ops/rmsnorm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "half_util.h"
#include "test_util.h"

namespace ht::ops::rmsnorm_test {
namespace {

using test::all_close;
using test::finite_diff_grad;
using test::random_tensor;
using test::throws_error;

constexpr double kEps = 1e-5;

struct RefOut {
  std::vector<double> y, rstd;
};

RefOut rmsnorm_ref(const std::vector<double>& x, const std::vector<double>& w, std::int64_t n, std::int64_t c,
                   double eps = kEps) {
  RefOut r{std::vector<double>(x.size()), std::vector<double>(std::size_t(n))};
  for (std::int64_t i = 0; i < n; ++i) {
    const double* row = x.data() + i * c;
    double ss = 0;
    for (std::int64_t j = 0; j < c; ++j) ss += row[j] * row[j];
    const double rs = 1.0 / std::sqrt(ss / double(c) + eps);
    for (std::int64_t j = 0; j < c; ++j) r.y[std::size_t(i * c + j)] = row[j] * rs * w[std::size_t(j)];
    r.rstd[std::size_t(i)] = rs;
  }
  return r;
}

struct Case {
  std::int64_t n, c;
};
// c = 1, primes, and widths across several 64-column blocks of the weight gradient.
const Case kCases[] = {{0, 5}, {1, 1}, {3, 2}, {5, 7}, {4, 64}, {2, 97}, {3, 257}, {1, 4096}};

TEST(RmsNorm, ForwardMatchesDoubleReference) {
  std::mt19937 rng(51);
  for (auto [n, c] : kCases) {
    for (float offset : {0.f, 10.f}) {
      SCOPED_TRACE(::testing::Message() << n << "x" << c << " offset " << offset);
      Tensor x = random_tensor({n, c}, rng, offset - 2.f, offset + 2.f);
      Tensor w = random_tensor({c}, rng, 0.5f, 1.5f);
      Tensor y = test::nan_tensor({n, c}), rstd = test::nan_tensor({n});
      rmsnorm_forward(x, w, y, rstd);
      const RefOut r = rmsnorm_ref(test::to_double(x), test::to_double(w), n, c);
      EXPECT_TRUE(all_close(y.to_vector<float>(), r.y, 2e-6));
      EXPECT_TRUE(all_close(rstd.to_vector<float>(), r.rstd, 2e-6));
    }
  }
}

TEST(RmsNorm, ZeroRowGivesZerosAndEps) {
  // mean(x^2) = 0: rstd = 1/sqrt(eps), y = 0 exactly.
  Tensor x = Tensor::zeros({2, 3}, DType::kF32);
  Tensor w = Tensor::from_vector(std::vector<float>{1, 2, 3}, {3});
  Tensor y = test::nan_tensor({2, 3}), rstd = test::nan_tensor({2});
  rmsnorm_forward(x, w, y, rstd, 1e-2f);
  EXPECT_EQ(y.to_vector<float>(), std::vector<float>(6, 0.f));
  EXPECT_FLOAT_EQ(rstd.item(0), 10.f);
  // A known row: x = (3, 4), mean(x^2) = 12.5, eps 0.25: rstd = 1/sqrt(12.75).
  Tensor x2 = Tensor::from_vector(std::vector<float>{3, 4}, {1, 2}), w2 = Tensor::from_vector(std::vector<float>{1, -2}, {2});
  Tensor y2 = test::nan_tensor({1, 2}), r2 = test::nan_tensor({1});
  rmsnorm_forward(x2, w2, y2, r2, 0.25f);
  const double rs = 1.0 / std::sqrt(12.75);
  EXPECT_TRUE(all_close(y2.to_vector<float>(), {3 * rs, -8 * rs}, 1e-7));
}

TEST(RmsNorm, ForwardYMayAliasX) {
  std::mt19937 rng(52);
  Tensor x = random_tensor({5, 33}, rng), w = random_tensor({33}, rng);
  Tensor y = Tensor::empty({5, 33}, DType::kF32), rstd = Tensor::empty({5}, DType::kF32);
  rmsnorm_forward(x, w, y, rstd);
  Tensor in_place = x.clone(), rstd2 = Tensor::empty({5}, DType::kF32);
  rmsnorm_forward(in_place, w, in_place, rstd2);
  EXPECT_EQ(in_place.to_vector<float>(), y.to_vector<float>());
  EXPECT_EQ(rstd2.to_vector<float>(), rstd.to_vector<float>());
}

TEST(RmsNorm, BackwardMatchesFiniteDifferences) {
  std::mt19937 rng(53);
  for (auto [n, c] : kCases) {
    if (n * c > 300) continue;  // finite differences cost O((n c)^2)
    SCOPED_TRACE(::testing::Message() << n << "x" << c);
    Tensor x = random_tensor({n, c}, rng, -2.f, 2.f);
    Tensor w = random_tensor({c}, rng, 0.5f, 1.5f);
    Tensor gy = random_tensor({n, c}, rng);  // L = sum gy * y
    Tensor y = Tensor::empty({n, c}, DType::kF32), rstd = Tensor::empty({n}, DType::kF32);
    rmsnorm_forward(x, w, y, rstd);
    // dx is overwritten (start from NaN); dweight accumulates onto its start.
    Tensor dx = test::nan_tensor({n, c}), dw = random_tensor({c}, rng);
    const auto dw0 = test::to_double(dw);
    rmsnorm_backward(gy, x, w, rstd, dx, dw);

    const auto vx = test::to_double(x), vw = test::to_double(w), vg = test::to_double(gy);
    auto loss = [&](const std::vector<double>& xx, const std::vector<double>& ww) {
      const RefOut r = rmsnorm_ref(xx, ww, n, c);
      double l = 0;
      for (std::size_t i = 0; i < r.y.size(); ++i) l += vg[i] * r.y[i];
      return l;
    };
    const auto want_dx = finite_diff_grad([&](const auto& v) { return loss(v, vw); }, vx);
    auto want_dw = finite_diff_grad([&](const auto& v) { return loss(vx, v); }, vw);
    for (std::size_t j = 0; j < want_dw.size(); ++j) want_dw[j] += dw0[j];
    // dx = rstd (g - xhat mean(g xhat)) cancels (exactly, for C = 1): its f32
    // error scales with rstd |dy w|, not with dx itself.
    double dx_scale = 0;
    const auto vr = test::to_double(rstd);
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = 0; j < c; ++j)
        dx_scale = std::max(dx_scale, vr[std::size_t(i)] * std::abs(vg[std::size_t(i * c + j)] * vw[std::size_t(j)]));
    EXPECT_TRUE(all_close(dx.to_vector<float>(), want_dx, 1e-4, 1e-5 * dx_scale)) << "dx";
    EXPECT_TRUE(all_close(dw.to_vector<float>(), want_dw, 1e-4)) << "dweight";
  }
}

TEST(RmsNorm, BackwardDxMayAliasDy) {
  std::mt19937 rng(54);
  const std::int64_t n = 6, c = 70;
  Tensor x = random_tensor({n, c}, rng), w = random_tensor({c}, rng), gy = random_tensor({n, c}, rng);
  Tensor y = Tensor::empty({n, c}, DType::kF32), rstd = Tensor::empty({n}, DType::kF32);
  rmsnorm_forward(x, w, y, rstd);
  Tensor dx = Tensor::empty({n, c}, DType::kF32), dw = Tensor::zeros({c}, DType::kF32);
  rmsnorm_backward(gy, x, w, rstd, dx, dw);
  Tensor dw2 = Tensor::zeros({c}, DType::kF32), g2 = gy.clone();
  rmsnorm_backward(g2, x, w, rstd, g2, dw2);
  EXPECT_EQ(g2.to_vector<float>(), dx.to_vector<float>());
  EXPECT_EQ(dw2.to_vector<float>(), dw.to_vector<float>());
}

#if defined(_OPENMP)
TEST(RmsNorm, SameBitsWithOneAndTwoThreads) {
  std::mt19937 rng(55);
  const std::int64_t n = 301, c = 200;
  Tensor x = random_tensor({n, c}, rng), w = random_tensor({c}, rng), gy = random_tensor({n, c}, rng);
  std::vector<std::vector<float>> out;
  for (int threads : {1, 2}) {
    Tensor y = Tensor::empty({n, c}, DType::kF32), rstd = Tensor::empty({n}, DType::kF32);
    Tensor dx = Tensor::empty({n, c}, DType::kF32), dw = Tensor::zeros({c}, DType::kF32);
    test::with_omp_threads(threads, [&] {
      rmsnorm_forward(x, w, y, rstd);
      rmsnorm_backward(gy, x, w, rstd, dx, dw);
    });
    for (const Tensor* t : {&y, &rstd, &dx, &dw}) out.push_back(t->to_vector<float>());
  }
  for (std::size_t i = 0; i < 4; ++i)
    EXPECT_EQ(std::memcmp(out[i].data(), out[i + 4].data(), out[i].size() * 4), 0) << "output " << i;
}
#endif

// f16 and bf16: x, weight, y, dy, dx and dweight in the 16-bit dtype, rstd
// f32, against the f32 op on the same values, within half_rtol.
TEST(RmsNorm, HalfMatchesF32OnTheSameValuesWithF32Rstd) {
  using test::half_close;
  using test::random_half;
  std::mt19937 rng(56);
  for (DType dt : test::kHalfDtypes)
    // (C = 1 is left out: dx is then zero up to rounding, which no relative tolerance fits.)
    for (auto [n, c] : {std::pair<std::int64_t, std::int64_t>{0, 8}, {1, 3}, {7, 33}, {64, 768}}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " " << n << "x" << c);
      const auto x = random_half({n, c}, dt, rng, -2.f, 3.f), w = random_half({c}, dt, rng),
                 dy = random_half({n, c}, dt, rng);
      Tensor y16 = test::nan_half({n, c}, dt), y32 = test::nan_tensor({n, c});
      Tensor rstd16 = test::nan_tensor({n}), rstd32 = test::nan_tensor({n});
      rmsnorm_forward(x.half, w.half, y16, rstd16);
      rmsnorm_forward(x.f32, w.f32, y32, rstd32);
      EXPECT_TRUE(half_close(y16, y32, dt));
      EXPECT_EQ(rstd16.dtype(), DType::kF32);
      EXPECT_TRUE(all_close(rstd16.to_vector<float>(), test::to_double(rstd32), 1e-6));
      const auto dw0 = random_half({c}, dt, rng, 1.f, 2.f);
      Tensor dx16 = test::nan_half({n, c}, dt), dw16 = dw0.half.clone();
      Tensor dx32 = test::nan_tensor({n, c}), dw32 = dw0.f32.clone();
      rmsnorm_backward(dy.half, x.half, w.half, rstd16, dx16, dw16);
      rmsnorm_backward(dy.f32, x.f32, w.f32, rstd32, dx32, dw32);
      EXPECT_TRUE(half_close(dx16, dx32, dt));
      EXPECT_TRUE(half_close(dw16, dw32, dt));
    }
}

TEST(RmsNorm, Errors) {
  auto t = [](Shape s, DType d = DType::kF32) { return Tensor::zeros(s, d); };
  Tensor y = t({4, 6}), rstd = t({4});
  EXPECT_TRUE(throws_error([&] { rmsnorm_forward(t({4, 6}), t({5}), y, rstd); }, ErrorKind::kShapeMismatch,
                           {"rmsnorm_forward", "'weight'", "[6]", "[5]"}));
  Tensor y3 = t({2, 2, 6});
  EXPECT_TRUE(throws_error([&] { rmsnorm_forward(t({2, 2, 6}), t({6}), y3, rstd); }, ErrorKind::kShapeMismatch,
                           {"'x'", "2-d"}));
  Tensor y0 = t({4, 0});
  EXPECT_TRUE(throws_error([&] { rmsnorm_forward(t({4, 0}), t({0}), y0, rstd); }, ErrorKind::kShapeMismatch,
                           {"empty"}));
  Tensor rstd5 = t({5}), rstd16 = t({4}, DType::kF16);
  EXPECT_TRUE(throws_error([&] { rmsnorm_forward(t({4, 6}), t({6}), y, rstd5); }, ErrorKind::kShapeMismatch,
                           {"'rstd'", "[4]"}));
  EXPECT_TRUE(throws_error([&] { rmsnorm_forward(t({4, 6}), t({6}), y, rstd16); }, ErrorKind::kDTypeMismatch,
                           {"'rstd' must be f32", "f16"}));
  EXPECT_TRUE(throws_error([&] { rmsnorm_forward(t({4, 6}, DType::kBF16), t({6}), y, rstd); },
                           ErrorKind::kDTypeMismatch, {"'weight' is f32", "'x' is bf16"}));
  EXPECT_TRUE(throws_error([&] { rmsnorm_forward(t({4, 6}), t({6}), y, rstd, 0.f); }, ErrorKind::kInvalidArgument,
                           {"eps must be positive"}));
  Tensor dx = t({4, 6}), dw = t({7});
  EXPECT_TRUE(throws_error([&] { rmsnorm_backward(t({4, 6}), t({4, 6}), t({6}), rstd, dx, dw); },
                           ErrorKind::kShapeMismatch, {"rmsnorm_backward", "'dweight'", "[7]"}));
  Tensor dw6 = t({6});
  EXPECT_TRUE(throws_error([&] { rmsnorm_backward(t({4, 5}), t({4, 6}), t({6}), rstd, dx, dw6); },
                           ErrorKind::kShapeMismatch, {"'dy'"}));
  EXPECT_TRUE(throws_error([&] { rmsnorm_backward(t({4, 6}), t({4, 6}), t({6}), rstd16, dx, dw6); },
                           ErrorKind::kDTypeMismatch, {"'rstd' must be f32"}));
}

}  // namespace
}  // namespace ht::ops::rmsnorm_test
