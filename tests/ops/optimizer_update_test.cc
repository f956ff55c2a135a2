// Fused AdamW and SGD updates against double-precision references of
// torch.optim.AdamW and torch.optim.SGD (dampening 0), over several steps.
#include "ht/ops/optimizer_update.h"

#include <gtest/gtest.h>

#include <cmath>

#include "ht/ops/cast.h"
#include "test_util.h"

namespace ht::ops::optimizer_update_test {
namespace {

using test::all_close;
using test::random_tensor;
using test::throws_error;

// A gradient of `dtype` and the values it actually holds (after rounding).
struct Grad {
  Tensor t;
  std::vector<double> values;
};

Grad make_grad(std::int64_t n, DType dtype, std::mt19937& rng) {
  Tensor g32 = random_tensor({n}, rng, -2.f, 2.f);
  float* p = g32.data<float>();
  // Some zero and some tiny gradients, where eps dominates the denominator.
  for (std::int64_t i = 0; i < n; i += 7) p[i] = 0.f;
  for (std::int64_t i = 3; i < n; i += 11) p[i] *= 1e-7f;
  Grad g{Tensor::empty({n}, dtype), {}};
  cast(g32, g.t);
  g.values = test::to_double(g.t);
  return g;
}

// torch.optim.AdamW, one step, in double.
void adamw_ref(std::vector<double>& p, const std::vector<double>& g, std::vector<double>& m, std::vector<double>& v,
               const AdamWHyper& h) {
  const double lr = h.lr, b1 = h.beta1, b2 = h.beta2, eps = h.eps, wd = h.weight_decay;
  const double bc1 = 1 - std::pow(b1, double(h.step)), bc2 = 1 - std::pow(b2, double(h.step));
  for (std::size_t i = 0; i < p.size(); ++i) {
    const double gi = g[i] * double(h.grad_scale);
    p[i] *= 1 - lr * wd;
    m[i] = b1 * m[i] + (1 - b1) * gi;
    v[i] = b2 * v[i] + (1 - b2) * gi * gi;
    const double denom = std::sqrt(v[i]) / std::sqrt(bc2) + eps;
    p[i] -= lr / bc1 * m[i] / denom;
  }
}

struct AdamCase {
  std::int64_t n;
  DType grad_dtype;
  AdamWHyper h;
};

TEST(AdamW, MatchesTorchFormulaOverSeveralSteps) {
  const AdamCase cases[] = {
      {1, DType::kF32, {}},
      {0, DType::kF32, {}},
      {37, DType::kF32, {.lr = 1e-2f, .weight_decay = 0.1f}},
      {1001, DType::kF32, {.lr = 3e-3f, .beta1 = 0.8f, .beta2 = 0.95f, .eps = 1e-6f, .weight_decay = 0.01f}},
      {257, DType::kF16, {.lr = 1e-2f, .weight_decay = 0.05f, .grad_scale = 1.f / 1024.f}},
      {130, DType::kBF16, {.lr = 5e-2f, .beta2 = 0.99f, .grad_scale = 0.5f}},
      {64, DType::kF32, {.lr = 1e-1f, .beta1 = 0.f, .beta2 = 0.f, .eps = 1e-8f}},
  };
  std::mt19937 rng(61);
  for (const AdamCase& c : cases) {
    SCOPED_TRACE(::testing::Message() << "n " << c.n << " grad " << dtype_name(c.grad_dtype) << " lr " << c.h.lr
                                      << " wd " << c.h.weight_decay);
    Tensor p = random_tensor({c.n}, rng), m = Tensor::zeros({c.n}, DType::kF32), v = Tensor::zeros({c.n}, DType::kF32);
    std::vector<double> rp = test::to_double(p), rm(std::size_t(c.n)), rv(std::size_t(c.n));
    for (std::int64_t step = 1; step <= 6; ++step) {
      SCOPED_TRACE(::testing::Message() << "step " << step);
      AdamWHyper h = c.h;
      h.step = step;
      const Grad g = make_grad(c.n, c.grad_dtype, rng);
      adamw_update(p, g.t, m, v, h);
      adamw_ref(rp, g.values, rm, rv, h);
      // p moves by up to lr per step; a wrong formula moves it by more than 1e-6.
      ASSERT_TRUE(all_close(p.to_vector<float>(), rp, 1e-6, 1e-7));
      ASSERT_TRUE(all_close(m.to_vector<float>(), rm, 1e-6));
      ASSERT_TRUE(all_close(v.to_vector<float>(), rv, 1e-6));
    }
  }
}

TEST(AdamW, FirstStepMovesEachParameterByLr) {
  // With bias correction, step 1 is p -= lr * g / (|g| + eps) = lr * sign(g) for |g| >> eps.
  Tensor p = Tensor::from_vector(std::vector<float>{1.f, 1.f, 1.f}, {3});
  Tensor g = Tensor::from_vector(std::vector<float>{0.5f, -3.f, 0.f}, {3});
  Tensor m = Tensor::zeros({3}, DType::kF32), v = Tensor::zeros({3}, DType::kF32);
  adamw_update(p, g, m, v, {.lr = 0.01f});
  EXPECT_NEAR(p.item(0), 0.99f, 1e-7f);
  EXPECT_NEAR(p.item(1), 1.01f, 1e-7f);
  EXPECT_EQ(p.item(2), 1.f);
}

TEST(AdamW, Errors) {
  auto t = [](Shape s, DType d = DType::kF32) { return Tensor::zeros(s, d); };
  Tensor p = t({4}), m = t({4}), v = t({4});
  AdamWHyper h;
  h.step = 0;
  EXPECT_TRUE(throws_error([&] { adamw_update(p, t({4}), m, v, h); }, ErrorKind::kInvalidArgument,
                           {"step must be >= 1", "got 0"}));
  h = {};
  h.beta1 = 1.f;
  EXPECT_TRUE(throws_error([&] { adamw_update(p, t({4}), m, v, h); }, ErrorKind::kInvalidArgument, {"betas"}));
  h = {};
  h.beta2 = -0.1f;
  EXPECT_TRUE(throws_error([&] { adamw_update(p, t({4}), m, v, h); }, ErrorKind::kInvalidArgument, {"betas"}));
  EXPECT_TRUE(throws_error([&] { adamw_update(p, t({5}), m, v, {}); }, ErrorKind::kShapeMismatch,
                           {"adamw_update", "4 elements", "[5]"}));
  Tensor v3 = t({3});
  EXPECT_TRUE(throws_error([&] { adamw_update(p, t({4}), m, v3, {}); }, ErrorKind::kShapeMismatch, {"[3]"}));
  Tensor p16 = t({4}, DType::kF16);
  EXPECT_TRUE(throws_error([&] { adamw_update(p16, t({4}), m, v, {}); }, ErrorKind::kDTypeMismatch, {"'param'"}));
  Tensor m16 = t({4}, DType::kBF16);
  EXPECT_TRUE(throws_error([&] { adamw_update(p, t({4}), m16, v, {}); }, ErrorKind::kDTypeMismatch, {"'exp_avg'"}));
  EXPECT_TRUE(throws_error([&] { adamw_update(p, t({4}, DType::kI32), m, v, {}); }, ErrorKind::kDTypeMismatch,
                           {"'grad'"}));
  Tensor undef;
  EXPECT_TRUE(throws_error([&] { adamw_update(p, t({4}), undef, v, {}); }, ErrorKind::kInvalidArgument,
                           {"'exp_avg' is undefined"}));
}

// SGD -------------------------------------------------------------------------------

// torch.optim.SGD (dampening 0), one step, in double. `first` as torch's empty buffer.
void sgd_ref(std::vector<double>& p, const std::vector<double>& g, std::vector<double>& buf, const SgdHyper& h,
             bool first) {
  const double lr = h.lr, mu = h.momentum, wd = h.weight_decay;
  for (std::size_t i = 0; i < p.size(); ++i) {
    double d = g[i] * double(h.grad_scale) + wd * p[i];
    if (mu != 0) {
      buf[i] = first ? d : mu * buf[i] + d;
      d = h.nesterov ? d + mu * buf[i] : buf[i];
    }
    p[i] -= lr * d;
  }
}

TEST(Sgd, MatchesTorchFormulaOverSeveralSteps) {
  struct Case {
    std::int64_t n;
    DType grad_dtype;
    SgdHyper h;
  };
  const Case cases[] = {
      {1, DType::kF32, {.lr = 0.1f}},
      {0, DType::kF32, {.lr = 0.1f, .momentum = 0.9f}},
      {33, DType::kF32, {.lr = 0.05f, .weight_decay = 0.01f}},
      {101, DType::kF32, {.lr = 0.05f, .momentum = 0.9f}},
      {101, DType::kF32, {.lr = 0.05f, .momentum = 0.9f, .nesterov = true}},
      {77, DType::kF32, {.lr = 0.02f, .momentum = 0.5f, .weight_decay = 0.1f, .nesterov = true, .grad_scale = 0.25f}},
      {64, DType::kBF16, {.lr = 0.02f, .momentum = 0.8f, .weight_decay = 0.01f}},
      {65, DType::kF16, {.lr = 0.02f, .grad_scale = 2.f}},
  };
  std::mt19937 rng(62);
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "n " << c.n << " momentum " << c.h.momentum << " nesterov " << c.h.nesterov
                                      << " wd " << c.h.weight_decay << " grad " << dtype_name(c.grad_dtype));
    Tensor p = random_tensor({c.n}, rng);
    // Without momentum the buffer may be undefined; with it, it starts as garbage
    // that the first step must ignore.
    Tensor buf = c.h.momentum != 0.f ? test::nan_tensor({c.n}) : Tensor();
    std::vector<double> rp = test::to_double(p), rbuf(std::size_t(c.n));
    for (int step = 1; step <= 5; ++step) {
      SCOPED_TRACE(::testing::Message() << "step " << step);
      SgdHyper h = c.h;
      h.first_step = step == 1;
      const Grad g = make_grad(c.n, c.grad_dtype, rng);
      sgd_update(p, g.t, buf, h);
      sgd_ref(rp, g.values, rbuf, h, step == 1);
      ASSERT_TRUE(all_close(p.to_vector<float>(), rp, 1e-6, 1e-7));
      if (buf.defined()) {
        ASSERT_TRUE(all_close(buf.to_vector<float>(), rbuf, 1e-6));
      }
    }
  }
}

TEST(Sgd, KnownSteps) {
  // lr 0.1, momentum 0.5: g = 1 twice. buf 1 then 1.5; p 1 -> 0.9 -> 0.75.
  Tensor p = Tensor::from_vector(std::vector<float>{1.f}, {1}), g = Tensor::from_vector(std::vector<float>{1.f}, {1});
  Tensor buf = Tensor::zeros({1}, DType::kF32);
  sgd_update(p, g, buf, {.lr = 0.1f, .momentum = 0.5f, .first_step = true});
  EXPECT_FLOAT_EQ(p.item(), 0.9f);
  sgd_update(p, g, buf, {.lr = 0.1f, .momentum = 0.5f});
  EXPECT_FLOAT_EQ(buf.item(), 1.5f);
  EXPECT_FLOAT_EQ(p.item(), 0.75f);
  // Nesterov: d = g + mu * buf = 1 + 0.5 * (0.5 * 1.5 + 1) = 1.875.
  sgd_update(p, g, buf, {.lr = 0.1f, .momentum = 0.5f, .nesterov = true});
  EXPECT_FLOAT_EQ(p.item(), 0.75f - 0.1875f);
}

TEST(Sgd, Errors) {
  auto t = [](Shape s, DType d = DType::kF32) { return Tensor::zeros(s, d); };
  Tensor p = t({4}), undef;
  EXPECT_TRUE(throws_error([&] { sgd_update(p, t({4}), undef, {.momentum = 0.9f}); }, ErrorKind::kInvalidArgument,
                           {"'momentum_buf' is undefined"}));
  Tensor buf3 = t({3});
  EXPECT_TRUE(throws_error([&] { sgd_update(p, t({4}), buf3, {.momentum = 0.9f}); }, ErrorKind::kShapeMismatch,
                           {"'momentum_buf'", "[3]"}));
  EXPECT_TRUE(throws_error([&] { sgd_update(p, t({5}), undef, {}); }, ErrorKind::kShapeMismatch, {"'grad'"}));
  Tensor p16 = t({4}, DType::kBF16);
  EXPECT_TRUE(throws_error([&] { sgd_update(p16, t({4}), undef, {}); }, ErrorKind::kDTypeMismatch, {"'param'"}));
}

}  // namespace
}  // namespace ht::ops::optimizer_update_test
