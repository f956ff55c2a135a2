// LayerNorm forward against a double-precision reference; backward (dx,
// dweight, dbias) against central finite differences of that reference.
#include "ht/ops/layernorm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "half_util.h"
#include "test_util.h"

namespace ht::ops::layernorm_test {
namespace {

using test::all_close;
using test::finite_diff_grad;
using test::random_tensor;
using test::throws_error;

constexpr double kEps = 1e-5;

struct RefOut {
  std::vector<double> y, mean, rstd;
};

RefOut layernorm_ref(const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>& b,
                     std::int64_t n, std::int64_t c) {
  RefOut r{std::vector<double>(x.size()), std::vector<double>(std::size_t(n)), std::vector<double>(std::size_t(n))};
  for (std::int64_t i = 0; i < n; ++i) {
    const double* row = x.data() + i * c;
    double m = 0;
    for (std::int64_t j = 0; j < c; ++j) m += row[j];
    m /= double(c);
    double var = 0;
    for (std::int64_t j = 0; j < c; ++j) var += (row[j] - m) * (row[j] - m);
    const double rs = 1.0 / std::sqrt(var / double(c) + kEps);
    for (std::int64_t j = 0; j < c; ++j)
      r.y[std::size_t(i * c + j)] = (row[j] - m) * rs * w[std::size_t(j)] + b[std::size_t(j)];
    r.mean[std::size_t(i)] = m;
    r.rstd[std::size_t(i)] = rs;
  }
  return r;
}

struct Case {
  std::int64_t n, c;
};
const Case kCases[] = {{0, 5}, {1, 1}, {3, 2}, {5, 7}, {4, 64}, {2, 97}, {3, 257}};

TEST(LayerNorm, ForwardMatchesDoubleReference) {
  std::mt19937 rng(11);
  for (auto [n, c] : kCases) {
    for (float offset : {0.f, 10.f}) {
      SCOPED_TRACE(::testing::Message() << n << "x" << c << " offset " << offset);
      Tensor x = random_tensor({n, c}, rng, offset - 2.f, offset + 2.f);
      Tensor w = random_tensor({c}, rng, 0.5f, 1.5f), b = random_tensor({c}, rng);
      Tensor y = test::nan_tensor({n, c}), mean = test::nan_tensor({n}), rstd = test::nan_tensor({n});
      layernorm_forward(x, w, b, y, mean, rstd);
      const RefOut r = layernorm_ref(test::to_double(x), test::to_double(w), test::to_double(b), n, c);
      EXPECT_TRUE(all_close(y.to_vector<float>(), r.y, 2e-5));
      EXPECT_TRUE(all_close(mean.to_vector<float>(), r.mean, 1e-6));
      EXPECT_TRUE(all_close(rstd.to_vector<float>(), r.rstd, 2e-5));
    }
  }
}

TEST(LayerNorm, ConstantRowGivesBias) {
  // Zero variance: rstd = 1/sqrt(eps), y = bias exactly.
  Tensor x = Tensor::from_vector(std::vector<float>(6, 3.f), {2, 3});
  Tensor w = Tensor::from_vector(std::vector<float>{1, 2, 3}, {3}), b = Tensor::from_vector(std::vector<float>{-1, 0, 1}, {3});
  Tensor y = Tensor::empty({2, 3}, DType::kF32), mean = Tensor::empty({2}, DType::kF32), rstd = Tensor::empty({2}, DType::kF32);
  layernorm_forward(x, w, b, y, mean, rstd, 1e-2f);
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{-1, 0, 1, -1, 0, 1}));
  EXPECT_EQ(mean.to_vector<float>(), (std::vector<float>{3, 3}));
  EXPECT_FLOAT_EQ(rstd.item(0), 10.f);
}

TEST(LayerNorm, BackwardMatchesFiniteDifferences) {
  std::mt19937 rng(12);
  for (auto [n, c] : kCases) {
    if (n * c > 300) continue;  // finite differences cost O((n c)^2)
    SCOPED_TRACE(::testing::Message() << n << "x" << c);
    Tensor x = random_tensor({n, c}, rng, -2.f, 2.f);
    Tensor w = random_tensor({c}, rng, 0.5f, 1.5f), b = random_tensor({c}, rng);
    Tensor gy = random_tensor({n, c}, rng);  // L = sum gy * y
    Tensor y = Tensor::empty({n, c}, DType::kF32), mean = Tensor::empty({n}, DType::kF32),
           rstd = Tensor::empty({n}, DType::kF32);
    layernorm_forward(x, w, b, y, mean, rstd);
    // dx is overwritten (start from NaN); dweight and dbias accumulate onto their start.
    Tensor dx = test::nan_tensor({n, c}), dw = random_tensor({c}, rng), db = random_tensor({c}, rng);
    const auto dw0 = test::to_double(dw), db0 = test::to_double(db);
    layernorm_backward(gy, x, w, mean, rstd, dx, dw, db);

    const auto vx = test::to_double(x), vw = test::to_double(w), vb = test::to_double(b), vg = test::to_double(gy);
    auto loss = [&](const std::vector<double>& xx, const std::vector<double>& ww, const std::vector<double>& bb) {
      const RefOut r = layernorm_ref(xx, ww, bb, n, c);
      double l = 0;
      for (std::size_t i = 0; i < r.y.size(); ++i) l += vg[i] * r.y[i];
      return l;
    };
    const auto want_dx = finite_diff_grad([&](const auto& v) { return loss(v, vw, vb); }, vx);
    auto want_dw = finite_diff_grad([&](const auto& v) { return loss(vx, v, vb); }, vw);
    auto want_db = finite_diff_grad([&](const auto& v) { return loss(vx, vw, v); }, vb);
    for (std::size_t j = 0; j < want_dw.size(); ++j) want_dw[j] += dw0[j], want_db[j] += db0[j];
    // dx = rstd (g - mean(g) - xhat mean(g xhat)) cancels (to nearly zero for
    // C = 2): its f32 error scales with rstd |dy w|, not with dx itself.
    double dx_scale = 0;
    const auto vr = test::to_double(rstd);
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = 0; j < c; ++j)
        dx_scale = std::max(dx_scale, vr[std::size_t(i)] * std::abs(vg[std::size_t(i * c + j)] * vw[std::size_t(j)]));
    EXPECT_TRUE(all_close(dx.to_vector<float>(), want_dx, 1e-4, 1e-5 * dx_scale)) << "dx";
    EXPECT_TRUE(all_close(dw.to_vector<float>(), want_dw, 1e-4)) << "dweight";
    EXPECT_TRUE(all_close(db.to_vector<float>(), want_db, 1e-4)) << "dbias";
  }
}

TEST(LayerNorm, BackwardDxMayAliasDy) {
  std::mt19937 rng(13);
  const std::int64_t n = 6, c = 70;
  Tensor x = random_tensor({n, c}, rng), w = random_tensor({c}, rng), b = random_tensor({c}, rng);
  Tensor gy = random_tensor({n, c}, rng);
  Tensor y = Tensor::empty({n, c}, DType::kF32), mean = Tensor::empty({n}, DType::kF32), rstd = Tensor::empty({n}, DType::kF32);
  layernorm_forward(x, w, b, y, mean, rstd);
  Tensor dx = Tensor::empty({n, c}, DType::kF32), dw = Tensor::zeros({c}, DType::kF32), db = Tensor::zeros({c}, DType::kF32);
  layernorm_backward(gy, x, w, mean, rstd, dx, dw, db);
  Tensor dw2 = Tensor::zeros({c}, DType::kF32), db2 = Tensor::zeros({c}, DType::kF32);
  Tensor g2 = gy.clone();
  layernorm_backward(g2, x, w, mean, rstd, g2, dw2, db2);
  EXPECT_EQ(g2.to_vector<float>(), dx.to_vector<float>());
  EXPECT_EQ(dw2.to_vector<float>(), dw.to_vector<float>());
  EXPECT_EQ(db2.to_vector<float>(), db.to_vector<float>());
}

#if defined(_OPENMP)
TEST(LayerNorm, BackwardSameBitsWithOneAndTwoThreads) {
  std::mt19937 rng(14);
  const std::int64_t n = 301, c = 200;
  Tensor x = random_tensor({n, c}, rng), w = random_tensor({c}, rng), b = random_tensor({c}, rng);
  Tensor gy = random_tensor({n, c}, rng);
  Tensor y = Tensor::empty({n, c}, DType::kF32), mean = Tensor::empty({n}, DType::kF32), rstd = Tensor::empty({n}, DType::kF32);
  layernorm_forward(x, w, b, y, mean, rstd);
  std::vector<std::vector<float>> out;
  for (int threads : {1, 2}) {
    Tensor dx = Tensor::empty({n, c}, DType::kF32), dw = Tensor::zeros({c}, DType::kF32), db = Tensor::zeros({c}, DType::kF32);
    test::with_omp_threads(threads, [&] { layernorm_backward(gy, x, w, mean, rstd, dx, dw, db); });
    out.push_back(dw.to_vector<float>());
    out.push_back(db.to_vector<float>());
  }
  EXPECT_EQ(std::memcmp(out[0].data(), out[2].data(), out[0].size() * 4), 0);
  EXPECT_EQ(std::memcmp(out[1].data(), out[3].data(), out[1].size() * 4), 0);
}
#endif

// f16 and bf16: x, weight, bias, y, dy, dx, dweight, dbias in the 16-bit
// dtype, mean and rstd f32, against the f32 op on the same values, within
// half_rtol (2e-3 f16, 1e-2 bf16); the statistics, computed in f32 from the
// same values, within f32 rounding.
TEST(LayerNorm, HalfMatchesF32OnTheSameValuesWithF32Statistics) {
  using test::half_close;
  using test::random_half;
  std::mt19937 rng(15);
  for (DType dt : test::kHalfDtypes)
    for (auto [n, c] : {std::pair<std::int64_t, std::int64_t>{0, 8}, {1, 1}, {7, 33}, {64, 768}}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " " << n << "x" << c);
      const auto x = random_half({n, c}, dt, rng, -2.f, 3.f), w = random_half({c}, dt, rng),
                 b = random_half({c}, dt, rng), dy = random_half({n, c}, dt, rng);
      Tensor y16 = test::nan_half({n, c}, dt), y32 = test::nan_tensor({n, c});
      Tensor mean16 = test::nan_tensor({n}), rstd16 = test::nan_tensor({n});
      Tensor mean32 = test::nan_tensor({n}), rstd32 = test::nan_tensor({n});
      layernorm_forward(x.half, w.half, b.half, y16, mean16, rstd16);
      layernorm_forward(x.f32, w.f32, b.f32, y32, mean32, rstd32);
      EXPECT_TRUE(half_close(y16, y32, dt));
      EXPECT_EQ(mean16.dtype(), DType::kF32);
      EXPECT_TRUE(all_close(mean16.to_vector<float>(), test::to_double(mean32), 1e-6));
      EXPECT_TRUE(all_close(rstd16.to_vector<float>(), test::to_double(rstd32), 1e-6));

      // dweight and dbias start from stored 16-bit values and accumulate.
      const auto dw0 = random_half({c}, dt, rng, 1.f, 2.f), db0 = random_half({c}, dt, rng, -2.f, -1.f);
      Tensor dx16 = test::nan_half({n, c}, dt), dw16 = dw0.half.clone(), db16 = db0.half.clone();
      Tensor dx32 = test::nan_tensor({n, c}), dw32 = dw0.f32.clone(), db32 = db0.f32.clone();
      layernorm_backward(dy.half, x.half, w.half, mean16, rstd16, dx16, dw16, db16);
      layernorm_backward(dy.f32, x.f32, w.f32, mean32, rstd32, dx32, dw32, db32);
      EXPECT_TRUE(half_close(dx16, dx32, dt));
      EXPECT_TRUE(half_close(dw16, dw32, dt));
      EXPECT_TRUE(half_close(db16, db32, dt));
      // dx may alias dy in 16-bit too.
      Tensor g = dy.half.clone(), dw2 = dw0.half.clone(), db2 = db0.half.clone();
      layernorm_backward(g, x.half, w.half, mean16, rstd16, g, dw2, db2);
      EXPECT_EQ(g.to_vector<float>(), dx16.to_vector<float>());
      EXPECT_EQ(dw2.to_vector<float>(), dw16.to_vector<float>());
    }
}

TEST(LayerNorm, HalfDtypeErrors) {
  auto t = [](Shape s, DType d) { return Tensor::zeros(s, d); };
  const DType h = DType::kF16, f = DType::kF32;
  Tensor y = t({4, 6}, h), mean = t({4}, f), rstd = t({4}, f);
  EXPECT_TRUE(throws_error([&] { layernorm_forward(t({4, 6}, h), t({6}, DType::kBF16), t({6}, h), y, mean, rstd); },
                           ErrorKind::kDTypeMismatch, {"layernorm_forward", "'weight' is bf16", "'x' is f16"}));
  Tensor mean16 = t({4}, h);
  EXPECT_TRUE(throws_error([&] { layernorm_forward(t({4, 6}, h), t({6}, h), t({6}, h), y, mean16, rstd); },
                           ErrorKind::kDTypeMismatch, {"'mean' must be f32", "f16"}));
  Tensor dx = t({4, 6}, h), dw = t({6}, f), db = t({6}, h);
  EXPECT_TRUE(throws_error([&] { layernorm_backward(t({4, 6}, h), t({4, 6}, h), t({6}, h), mean, rstd, dx, dw, db); },
                           ErrorKind::kDTypeMismatch, {"layernorm_backward", "'dweight' is f32", "'dy' is f16"}));
  Tensor dw16 = t({6}, h), rstd16 = t({4}, DType::kBF16);
  EXPECT_TRUE(throws_error([&] { layernorm_backward(t({4, 6}, h), t({4, 6}, h), t({6}, h), mean, rstd16, dx, dw16,
                                                    db); },
                           ErrorKind::kDTypeMismatch, {"'rstd' must be f32"}));
}

TEST(LayerNorm, Errors) {
  auto t = [](Shape s, DType d = DType::kF32) { return Tensor::zeros(s, d); };
  Tensor y = t({4, 6}), mean = t({4}), rstd = t({4});
  EXPECT_TRUE(throws_error([&] { layernorm_forward(t({4, 6}), t({5}), t({6}), y, mean, rstd); },
                           ErrorKind::kShapeMismatch, {"layernorm_forward", "'weight'", "[6]", "[5]"}));
  EXPECT_TRUE(throws_error([&] { layernorm_forward(t({4, 6}), t({6}), t({6, 1}), y, mean, rstd); },
                           ErrorKind::kShapeMismatch, {"'bias'"}));
  Tensor y3 = t({2, 2, 6});
  EXPECT_TRUE(throws_error([&] { layernorm_forward(t({2, 2, 6}), t({6}), t({6}), y3, mean, rstd); },
                           ErrorKind::kShapeMismatch, {"'x'", "2-d"}));
  Tensor mean5 = t({5});
  EXPECT_TRUE(throws_error([&] { layernorm_forward(t({4, 6}), t({6}), t({6}), y, mean5, rstd); },
                           ErrorKind::kShapeMismatch, {"'mean'"}));
  EXPECT_TRUE(throws_error([&] { layernorm_forward(t({4, 6}, DType::kBF16), t({6}), t({6}), y, mean, rstd); },
                           ErrorKind::kDTypeMismatch, {"bf16"}));
  EXPECT_TRUE(throws_error([&] { layernorm_forward(t({4, 6}), t({6}), t({6}), y, mean, rstd, 0.f); },
                           ErrorKind::kInvalidArgument, {"eps must be positive"}));
  Tensor dx = t({4, 6}), dw = t({6}), db = t({7});
  EXPECT_TRUE(throws_error([&] { layernorm_backward(t({4, 6}), t({4, 6}), t({6}), mean, rstd, dx, dw, db); },
                           ErrorKind::kShapeMismatch, {"layernorm_backward", "'dbias'", "[7]"}));
  Tensor db6 = t({6});
  EXPECT_TRUE(throws_error([&] { layernorm_backward(t({4, 5}), t({4, 6}), t({6}), mean, rstd, dx, dw, db6); },
                           ErrorKind::kShapeMismatch, {"'dy'"}));
}

}  // namespace
}  // namespace ht::ops::layernorm_test
