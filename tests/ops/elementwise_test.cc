// Element-wise ops: add, scale, bias_add, bias_grad, GELU forward and
// backward, against double-precision references and finite differences;
// the fused GELU ops against the ops they fuse.
#include "ht/ops/elementwise.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "half_util.h"
#include "ht/ops/cast.h"
#include "test_util.h"

namespace ht::ops::elementwise_test {
namespace {

using test::all_close;
using test::finite_diff_grad;
using test::random_tensor;
using test::throws_error;

const std::int64_t kSizes[] = {0, 1, 2, 7, 64, 65, 131, 1031};

double gelu_ref(double x) {
  const double k = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

TEST(Add, ExactAndMayAlias) {
  std::mt19937 rng(1);
  for (std::int64_t n : kSizes) {
    Tensor a = random_tensor({n}, rng), b = random_tensor({n}, rng), out = test::nan_tensor({n});
    add(a, b, out);
    const auto va = a.to_vector<float>(), vb = b.to_vector<float>(), vo = out.to_vector<float>();
    for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(vo[std::size_t(i)], va[std::size_t(i)] + vb[std::size_t(i)]);
    add(a, b, a);  // out aliases a
    EXPECT_EQ(a.to_vector<float>(), vo);
  }
  // Only element counts must agree, not shapes.
  Tensor a = Tensor::zeros({2, 3}, DType::kF32), b = Tensor::zeros({6}, DType::kF32), o = Tensor::zeros({3, 2}, DType::kF32);
  EXPECT_NO_THROW(add(a, b, o));
}

TEST(Scale, Exact) {
  std::mt19937 rng(2);
  for (std::int64_t n : kSizes) {
    Tensor x = random_tensor({n}, rng);
    const auto before = x.to_vector<float>();
    scale(x, -0.37f);
    const auto after = x.to_vector<float>();
    for (std::size_t i = 0; i < after.size(); ++i) ASSERT_EQ(after[i], before[i] * -0.37f);
  }
}

TEST(BiasAdd, BroadcastsOverRows) {
  std::mt19937 rng(3);
  for (const Shape& s : std::vector<Shape>{{0, 5}, {1, 1}, {3, 7}, {17, 65}, {2, 3, 13}, {4, 0}, {9}}) {
    Tensor y = random_tensor(s, rng), bias = random_tensor({s.back()}, rng);
    const auto y0 = y.to_vector<float>(), vb = bias.to_vector<float>();
    bias_add(y, bias);
    const auto got = y.to_vector<float>();
    const std::size_t c = std::size_t(s.back());
    for (std::size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], y0[i] + vb[i % c]) << shape_str(s);
  }
}

TEST(BiasGrad, MatchesFiniteDifferencesAndAccumulates) {
  std::mt19937 rng(4);
  for (std::int64_t rows : {0, 1, 5, 17, 100})
    for (std::int64_t c : {1, 7, 64, 65, 130}) {
      SCOPED_TRACE(::testing::Message() << rows << "x" << c);
      // L = sum w * (y + bias broadcast); dL/dbias is what bias_grad(w) adds.
      Tensor w = random_tensor({rows, c}, rng), y = random_tensor({rows, c}, rng);
      Tensor dbias = random_tensor({c}, rng);
      const auto d0 = test::to_double(dbias);
      const auto vw = test::to_double(w), vy = test::to_double(y);
      auto loss = [&](const std::vector<double>& bias) {
        double l = 0;
        for (std::int64_t r = 0; r < rows; ++r)
          for (std::int64_t j = 0; j < c; ++j)
            l += vw[std::size_t(r * c + j)] * (vy[std::size_t(r * c + j)] + bias[std::size_t(j)]);
        return l;
      };
      std::vector<double> want = finite_diff_grad(loss, test::to_double(random_tensor({c}, rng)));
      for (std::size_t j = 0; j < want.size(); ++j) want[j] += d0[j];
      bias_grad(w, dbias);
      EXPECT_TRUE(all_close(dbias.to_vector<float>(), want, 1e-5));
    }
}

TEST(BiasGrad, AcceptsThreeDimensionalGradients) {
  Tensor dy = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {2, 3, 2});
  Tensor db = Tensor::from_vector(std::vector<float>{100, 200}, {2});
  bias_grad(dy, db);
  EXPECT_EQ(db.to_vector<float>(), (std::vector<float>{136, 242}));  // 1+3+..+11 = 36, 2+4+..+12 = 42
}

TEST(Gelu, ForwardMatchesDoubleReference) {
  std::mt19937 rng(5);
  for (std::int64_t n : kSizes) {
    Tensor x = random_tensor({n}, rng, -6.f, 6.f), y = test::nan_tensor({n});
    gelu_forward(x, y);
    std::vector<double> want;
    for (float v : x.to_vector<float>()) want.push_back(gelu_ref(v));
    // For x << 0, gelu = 0.5 x (1 + tanh(..)) cancels: tanhf's error of an ulp
    // of 1 becomes an absolute error near 0.5 |x| 2^-23, hence the atol.
    EXPECT_TRUE(all_close(y.to_vector<float>(), want, 2e-6, 5e-7)) << n;
    gelu_forward(x, x);  // in place
    EXPECT_EQ(x.to_vector<float>(), y.to_vector<float>());
  }
  // Known values: gelu(0) = 0, gelu is ~x for large x and ~0 for very negative x.
  Tensor x = Tensor::from_vector(std::vector<float>{0.f, 10.f, -10.f, 1.f}, {4}), y = Tensor::zeros({4}, DType::kF32);
  gelu_forward(x, y);
  EXPECT_EQ(y.item(0), 0.f);
  EXPECT_FLOAT_EQ(y.item(1), 10.f);
  EXPECT_NEAR(y.item(2), 0.f, 1e-6f);
  EXPECT_NEAR(y.item(3), 0.8411920071f, 1e-6f);
}

TEST(Gelu, BackwardMatchesFiniteDifferences) {
  std::mt19937 rng(6);
  for (std::int64_t n : kSizes) {
    Tensor x = random_tensor({n}, rng, -5.f, 5.f), w = random_tensor({n}, rng), dx = test::nan_tensor({n});
    gelu_backward(x, w, dx);
    // L = sum w_i gelu(x_i): element-wise, so each derivative is a 1-D central difference.
    const auto vx = x.to_vector<float>(), vw = w.to_vector<float>();
    std::vector<double> want(vx.size());
    for (std::size_t i = 0; i < vx.size(); ++i) {
      const double h = 1e-6;
      want[i] = vw[i] * (gelu_ref(vx[i] + h) - gelu_ref(vx[i] - h)) / (2 * h);
    }
    EXPECT_TRUE(all_close(dx.to_vector<float>(), want, 1e-5)) << n;
    gelu_backward(x, w, w);  // dx aliases dy
    EXPECT_EQ(w.to_vector<float>(), dx.to_vector<float>());
  }
}

// f16 and bf16 ------------------------------------------------------------------
// Each op in a 16-bit dtype against the same op in f32 on the same (16-bit)
// values. Element-wise results must be exactly the f32 result rounded once;
// bias_grad's column sums only within the dtype's tolerance (half_rtol: 2e-3
// for f16, 1e-2 for bf16).

using test::half_close;
using test::kHalfDtypes;
using test::nan_half;
using test::random_half;
using test::rounded_once;

TEST(Elementwise, HalfAddScaleGeluRoundOnceFromF32) {
  std::mt19937 rng(8);
  // Sizes around the CPU driver's 2048-element conversion blocks, and many blocks.
  for (DType dt : kHalfDtypes)
    for (std::int64_t n : {0, 1, 7, 65, 1031, 2047, 2048, 2049, 300007}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " n=" << n);
      const auto a = random_half({n}, dt, rng, -4.f, 4.f), b = random_half({n}, dt, rng, -4.f, 4.f);
      Tensor out = nan_half({n}, dt), out32 = test::nan_tensor({n});
      add(a.half, b.half, out);
      add(a.f32, b.f32, out32);
      EXPECT_TRUE(rounded_once(out, out32));
      Tensor in_place = a.half.clone();  // out aliases a
      add(in_place, b.half, in_place);
      EXPECT_TRUE(rounded_once(in_place, out32));

      Tensor x = a.half.clone(), x32 = a.f32.clone();
      scale(x, -0.37f);
      scale(x32, -0.37f);
      EXPECT_TRUE(rounded_once(x, x32));

      const auto dy = random_half({n}, dt, rng);
      Tensor y = nan_half({n}, dt), y32 = test::nan_tensor({n});
      gelu_forward(a.half, y);
      gelu_forward(a.f32, y32);
      EXPECT_TRUE(rounded_once(y, y32));
      Tensor dx = nan_half({n}, dt), dx32 = test::nan_tensor({n});
      gelu_backward(a.half, dy.half, dx);
      gelu_backward(a.f32, dy.f32, dx32);
      EXPECT_TRUE(rounded_once(dx, dx32));
      Tensor y_in_place = a.half.clone(), dx_in_place = dy.half.clone();  // y aliases x, dx aliases dy
      gelu_forward(y_in_place, y_in_place);
      gelu_backward(a.half, dx_in_place, dx_in_place);
      EXPECT_TRUE(rounded_once(y_in_place, y32));
      EXPECT_TRUE(rounded_once(dx_in_place, dx32));
    }
}

TEST(Elementwise, HalfBiasAddAndBiasGradAccumulate) {
  std::mt19937 rng(9);
  for (DType dt : kHalfDtypes)
    for (const Shape& s : std::vector<Shape>{{0, 5}, {1, 1}, {17, 65}, {2, 3, 13}, {300, 70}}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " " << shape_str(s));
      const std::int64_t c = s.back();
      // bias_add: y's stored values plus the bias, in f32, rounded once.
      const auto y = random_half(s, dt, rng), bias = random_half({c}, dt, rng);
      Tensor y16 = y.half.clone(), y32 = y.f32.clone();
      bias_add(y16, bias.half);
      bias_add(y32, bias.f32);
      EXPECT_TRUE(rounded_once(y16, y32));
      // bias_grad: dbias starts from its stored values and accumulates.
      const auto dy = random_half(s, dt, rng), dbias = random_half({c}, dt, rng, 10.f, 20.f);
      Tensor db16 = dbias.half.clone(), db32 = dbias.f32.clone();
      bias_grad(dy.half, db16);
      bias_grad(dy.f32, db32);
      EXPECT_TRUE(half_close(db16, db32, dt));
      EXPECT_TRUE(rounded_once(db16, db32));  // this CPU driver sums in f32 and rounds at the end
    }
}

// bias_fill then a GEMM with beta 1 is what the Linear layer runs instead
// of GEMM then bias_add; the fused GELU backward gives exactly what GELU's
// backward then bias_grad give: same bits in f32 (the same per-element math
// and the same column-sum order), and in 16 bits (where it is the two ops).
TEST(BiasFill, EveryRowIsTheBias) {
  std::mt19937 rng(13);
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16})
    for (const Shape& s : std::vector<Shape>{{0, 5}, {1, 1}, {3, 65}, {2, 7, 131}}) {
      const std::int64_t c = s.back();
      Tensor bias = Tensor::empty({c}, dt), y = Tensor::empty(s, dt);
      cast(random_tensor({c}, rng), bias);
      y.fill_(NAN);  // whatever y held is overwritten
      bias_fill(y, bias);
      const auto b = bias.to_vector<float>(), v = y.to_vector<float>();
      for (std::size_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], b[i % std::size_t(c)]) << dtype_name(dt);
    }
}

TEST(FusedGelu, SameBitsAsGeluBackwardThenBiasGrad) {
  std::mt19937 rng(12);
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16})
    for (const Shape& s : std::vector<Shape>{{0, 5}, {1, 1}, {3, 65}, {2, 7, 131}, {257, 300}}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " " << shape_str(s));
      const std::int64_t c = s.back();
      auto rand = [&](const Shape& shape, float lo = -3.f, float hi = 3.f) {
        Tensor f = random_tensor(shape, rng, lo, hi);
        if (dt == DType::kF32) return f;
        Tensor h = Tensor::empty(shape, dt);
        cast(f, h);
        return h;
      };
      const Tensor h_two = rand(s), dy = rand(s), db0 = rand({c});
      Tensor dx_fused = dy.clone(), db_fused = db0.clone();  // dx aliasing dy, as the MLP calls it
      gelu_backward_bias_grad(h_two, dx_fused, dx_fused, db_fused);
      Tensor dx_two = Tensor::empty(s, dt), db_two = db0.clone();
      gelu_backward(h_two, dy, dx_two);
      bias_grad(dx_two, db_two);
      EXPECT_EQ(dx_fused.to_vector<float>(), dx_two.to_vector<float>());
      EXPECT_EQ(db_fused.to_vector<float>(), db_two.to_vector<float>());
    }
  Tensor h = Tensor::zeros({4, 6}, DType::kF32);
  EXPECT_TRUE(throws_error([&] { bias_fill(h, Tensor::zeros({5}, DType::kF32)); }, ErrorKind::kShapeMismatch,
                           {"bias_fill", "bias size 5"}));
  Tensor db = Tensor::zeros({6}, DType::kF16);
  EXPECT_TRUE(throws_error([&] { gelu_backward_bias_grad(h, h, h, db); }, ErrorKind::kDTypeMismatch,
                           {"gelu_backward_bias_grad", "'dbias' is f16"}));
}

TEST(Elementwise, HalfDtypesMustNotMix) {
  auto t = [](Shape s, DType d) { return Tensor::zeros(s, d); };
  Tensor out = t({5}, DType::kBF16);
  EXPECT_TRUE(throws_error([&] { add(t({5}, DType::kF16), t({5}, DType::kF16), out); }, ErrorKind::kDTypeMismatch,
                           {"add", "'out' is bf16", "'a' is f16", "one compute dtype"}));
  Tensor y = t({4, 6}, DType::kF16);
  EXPECT_TRUE(throws_error([&] { bias_add(y, t({6}, DType::kF32)); }, ErrorKind::kDTypeMismatch,
                           {"bias_add", "'bias' is f32", "'y' is f16"}));
  Tensor db = t({6}, DType::kF32);
  EXPECT_TRUE(throws_error([&] { bias_grad(t({4, 6}, DType::kBF16), db); }, ErrorKind::kDTypeMismatch,
                           {"'dbias' is f32", "'dy' is bf16"}));
  Tensor gy = t({6}, DType::kF32);
  EXPECT_TRUE(throws_error([&] { gelu_forward(t({6}, DType::kF16), gy); }, ErrorKind::kDTypeMismatch,
                           {"gelu_forward", "'y' is f32"}));
  Tensor gdx = t({6}, DType::kBF16);
  EXPECT_TRUE(throws_error([&] { gelu_backward(t({6}, DType::kBF16), t({6}, DType::kF16), gdx); },
                           ErrorKind::kDTypeMismatch, {"gelu_backward", "'dy' is f16", "'x' is bf16"}));
}

#if defined(_OPENMP)
TEST(BiasGrad, SameBitsWithOneAndTwoThreads) {
  std::mt19937 rng(7);
  Tensor dy = random_tensor({513, 300}, rng);
  std::vector<std::vector<float>> results;
  for (int threads : {1, 2}) {
    Tensor db = Tensor::zeros({300}, DType::kF32);
    test::with_omp_threads(threads, [&] { bias_grad(dy, db); });
    results.push_back(db.to_vector<float>());
  }
  EXPECT_EQ(std::memcmp(results[0].data(), results[1].data(), results[0].size() * sizeof(float)), 0);
}
#endif

TEST(Elementwise, Errors) {
  auto t = [](Shape s, DType d = DType::kF32) { return Tensor::zeros(s, d); };
  Tensor out = t({5});
  EXPECT_TRUE(throws_error([&] { add(t({5}), t({4}), out); }, ErrorKind::kShapeMismatch, {"add", "'b'", "5 elements"}));
  Tensor out4 = t({4});
  EXPECT_TRUE(throws_error([&] { add(t({5}), t({5}), out4); }, ErrorKind::kShapeMismatch, {"'out'"}));
  EXPECT_TRUE(throws_error([&] { add(t({5}, DType::kF16), t({5}), out); }, ErrorKind::kDTypeMismatch, {"f16"}));
  Tensor undef;
  EXPECT_TRUE(throws_error([&] { add(t({5}), undef, out); }, ErrorKind::kInvalidArgument, {"'b' is undefined"}));
  Tensor xi = t({3}, DType::kI32);
  EXPECT_TRUE(throws_error([&] { scale(xi, 2.f); }, ErrorKind::kDTypeMismatch, {"scale", "i32"}));

  Tensor y = t({4, 6});
  EXPECT_TRUE(throws_error([&] { bias_add(y, t({5})); }, ErrorKind::kShapeMismatch, {"bias_add", "[4, 6]", "5"}));
  EXPECT_TRUE(throws_error([&] { bias_add(y, t({1, 6})); }, ErrorKind::kShapeMismatch, {"'bias'", "1-d"}));
  EXPECT_TRUE(throws_error([&] { bias_add(y, t({6}, DType::kBF16)); }, ErrorKind::kDTypeMismatch, {"bf16"}));
  Tensor db = t({5});
  EXPECT_TRUE(throws_error([&] { bias_grad(t({4, 6}), db); }, ErrorKind::kShapeMismatch, {"bias_grad", "[4, 6]"}));
  Tensor db16 = t({6}, DType::kF16);
  EXPECT_TRUE(throws_error([&] { bias_grad(t({4, 6}), db16); }, ErrorKind::kDTypeMismatch, {"'dbias'"}));

  Tensor gy = t({7});
  EXPECT_TRUE(throws_error([&] { gelu_forward(t({6}), gy); }, ErrorKind::kShapeMismatch, {"gelu_forward", "'y'"}));
  Tensor gdx = t({6});
  EXPECT_TRUE(throws_error([&] { gelu_backward(t({6}), t({5}), gdx); }, ErrorKind::kShapeMismatch, {"'dy'"}));
  EXPECT_TRUE(throws_error([&] { gelu_backward(t({6}), t({6}, DType::kI32), gdx); }, ErrorKind::kDTypeMismatch,
                           {"gelu_backward"}));
}

}  // namespace
}  // namespace ht::ops::elementwise_test
