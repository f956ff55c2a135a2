// Causal multi-head attention forward against a double-precision reference,
// backward against central finite differences of that reference, and the
// causal structure of both: the future never reaches the past.
#include "ht/ops/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <tuple>

#include "half_util.h"
#include "test_util.h"

namespace ht::ops {
namespace {

using test::all_close;
using test::finite_diff_grad;
using test::random_tensor;
using test::throws_error;

struct Dims {
  std::int64_t b, t, c, h;
};

// out (B, T, C) and probs (B, H, T, T) from qkv (B, T, 3C), straight from the definition.
void attention_ref(const std::vector<double>& qkv, const Dims& d, std::vector<double>& out, std::vector<double>& probs) {
  const std::int64_t hs = d.c / d.h, ld = 3 * d.c;
  out.assign(std::size_t(d.b * d.t * d.c), 0.0);
  probs.assign(std::size_t(d.b * d.h * d.t * d.t), 0.0);
  const double scale = 1.0 / std::sqrt(double(hs));
  for (std::int64_t b = 0; b < d.b; ++b)
    for (std::int64_t h = 0; h < d.h; ++h)
      for (std::int64_t i = 0; i < d.t; ++i) {
        auto at = [&](std::int64_t pos, int part, std::int64_t e) {
          return qkv[std::size_t(b * d.t * ld + pos * ld + part * d.c + h * hs + e)];
        };
        std::vector<double> s(std::size_t(i + 1));
        double mx = -INFINITY;
        for (std::int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (std::int64_t e = 0; e < hs; ++e) dot += at(i, 0, e) * at(j, 1, e);
          s[std::size_t(j)] = dot * scale;
          mx = std::max(mx, s[std::size_t(j)]);
        }
        double sum = 0;
        for (double& v : s) sum += (v = std::exp(v - mx));
        double* p = probs.data() + ((b * d.h + h) * d.t + i) * d.t;
        for (std::int64_t j = 0; j <= i; ++j) p[j] = s[std::size_t(j)] / sum;
        for (std::int64_t e = 0; e < hs; ++e) {
          double o = 0;
          for (std::int64_t j = 0; j <= i; ++j) o += p[j] * at(j, 2, e);
          out[std::size_t((b * d.t + i) * d.c + h * hs + e)] = o;
        }
      }
}

const Dims kDims[] = {{1, 1, 4, 1}, {1, 2, 3, 3}, {2, 5, 6, 2}, {1, 7, 12, 3}, {2, 13, 8, 4}, {3, 4, 10, 5}, {1, 9, 16, 1}};

struct Forward {
  Tensor qkv, out, probs;
};

Forward forward(const Dims& d, std::mt19937& rng, float range = 1.f) {
  Forward r{random_tensor({d.b, d.t, 3 * d.c}, rng, -range, range), test::nan_tensor({d.b, d.t, d.c}),
        test::nan_tensor({d.b, d.h, d.t, d.t})};
  attention_forward(r.qkv, int(d.h), r.out, r.probs);
  return r;
}

TEST(Attention, ForwardMatchesDoubleReference) {
  std::mt19937 rng(21);
  for (const Dims& d : kDims) {
    for (float range : {1.f, 4.f}) {  // 4: peaked softmax rows
      SCOPED_TRACE(::testing::Message() << "B " << d.b << " T " << d.t << " C " << d.c << " H " << d.h << " range "
                                        << range);
      Forward r = forward(d, rng, range);
      std::vector<double> out, probs;
      attention_ref(test::to_double(r.qkv), d, out, probs);
      EXPECT_TRUE(all_close(r.out.to_vector<float>(), out, 1e-5));
      EXPECT_TRUE(all_close(r.probs.to_vector<float>(), probs, 1e-5));
      // The upper triangle of probs is exactly zero; each row sums to 1.
      const auto p = r.probs.to_vector<float>();
      for (std::int64_t row = 0; row < d.b * d.h * d.t; ++row) {
        const std::int64_t i = row % d.t;
        double sum = 0;
        for (std::int64_t j = 0; j < d.t; ++j) {
          const float v = p[std::size_t(row * d.t + j)];
          if (j > i) {
            ASSERT_EQ(v, 0.f);
          }
          sum += v;
        }
        EXPECT_NEAR(sum, 1.0, 1e-6);
      }
    }
  }
}

TEST(Attention, EmptyBatchIsANoOp) {
  Tensor qkv = Tensor::zeros({0, 3, 12}, DType::kF32), out = Tensor::zeros({0, 3, 4}, DType::kF32);
  Tensor probs = Tensor::zeros({0, 2, 3, 3}, DType::kF32), dqkv = Tensor::zeros({0, 3, 12}, DType::kF32);
  EXPECT_NO_THROW(attention_forward(qkv, 2, out, probs));
  EXPECT_NO_THROW(attention_backward(out, qkv, probs, 2, dqkv));
}

TEST(Attention, BackwardMatchesFiniteDifferences) {
  std::mt19937 rng(22);
  for (const Dims& d : kDims) {
    SCOPED_TRACE(::testing::Message() << "B " << d.b << " T " << d.t << " C " << d.c << " H " << d.h);
    Forward r = forward(d, rng, 1.5f);
    Tensor w = random_tensor({d.b, d.t, d.c}, rng);  // L = sum w * out
    Tensor dqkv = test::nan_tensor({d.b, d.t, 3 * d.c});  // overwritten
    attention_backward(w, r.qkv, r.probs, int(d.h), dqkv);
    const auto vw = test::to_double(w);
    const auto want = finite_diff_grad(
        [&](const std::vector<double>& qkv) {
          std::vector<double> out, probs;
          attention_ref(qkv, d, out, probs);
          double l = 0;
          for (std::size_t i = 0; i < out.size(); ++i) l += vw[i] * out[i];
          return l;
        },
        test::to_double(r.qkv));
    EXPECT_TRUE(all_close(dqkv.to_vector<float>(), want, 1e-4));
  }
}

TEST(Attention, FutureGetsExactlyZeroGradient) {
  // L depends on the outputs at positions <= t0 only, so the gradients with
  // respect to q, k and v at every later position are exactly zero: causality.
  std::mt19937 rng(23);
  const Dims d{2, 11, 12, 3};
  Forward r = forward(d, rng);
  for (std::int64_t t0 = 0; t0 < d.t; ++t0) {
    Tensor w = random_tensor({d.b, d.t, d.c}, rng);
    for (std::int64_t b = 0; b < d.b; ++b) w[b].slice(t0 + 1, d.t).zero_();
    Tensor dqkv = test::nan_tensor({d.b, d.t, 3 * d.c});
    attention_backward(w, r.qkv, r.probs, int(d.h), dqkv);
    for (std::int64_t b = 0; b < d.b; ++b) {
      for (std::int64_t pos = 0; pos < d.t; ++pos) {
        const auto row = dqkv[b][pos].to_vector<float>();
        for (std::int64_t e = 0; e < 3 * d.c; ++e) {
          if (pos > t0) {
            ASSERT_EQ(row[std::size_t(e)], 0.f) << "t0 " << t0 << " b " << b << " pos " << pos << " e " << e;
          } else if (e >= d.c) {  // keys and values up to t0 do matter
            ASSERT_TRUE(std::isfinite(row[std::size_t(e)]));
          }
        }
      }
    }
  }
}

TEST(Attention, PastOutputsIgnoreTheFuture) {
  // Changing q, k, v at position t0 + 1 onwards leaves outputs up to t0 bit-identical.
  std::mt19937 rng(24);
  const Dims d{1, 9, 8, 2};
  Forward a = forward(d, rng);
  const std::int64_t t0 = 4;
  Tensor qkv2 = a.qkv.clone();
  qkv2[0].slice(t0 + 1, d.t).fill_(123.f);
  Tensor out2 = Tensor::empty({d.b, d.t, d.c}, DType::kF32), probs2 = Tensor::empty({d.b, d.h, d.t, d.t}, DType::kF32);
  attention_forward(qkv2, int(d.h), out2, probs2);
  EXPECT_EQ(a.out[0].slice(0, t0 + 1).to_vector<float>(), out2[0].slice(0, t0 + 1).to_vector<float>());
}

// f16 and bf16: qkv, out, probs, dout and dqkv in the 16-bit dtype, against
// the f32 op on the same values (backward on the 16-bit probs, widened),
// within half_rtol (2e-3 f16, 1e-2 bf16).
TEST(Attention, HalfMatchesF32OnTheSameValues) {
  using test::half_close;
  using test::random_half;
  std::mt19937 rng(16);
  for (DType dt : test::kHalfDtypes)
    for (auto [b, t, c, h] : {std::tuple<std::int64_t, std::int64_t, std::int64_t, int>{1, 1, 8, 2},
                              {2, 7, 12, 3}, {2, 33, 64, 4}, {0, 5, 8, 2}}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " b " << b << " t " << t << " c " << c << " h " << h);
      const auto qkv = random_half({b, t, 3 * c}, dt, rng, -2.f, 2.f), dout = random_half({b, t, c}, dt, rng);
      Tensor out16 = test::nan_half({b, t, c}, dt), probs16 = test::nan_half({b, h, t, t}, dt);
      Tensor out32 = test::nan_tensor({b, t, c}), probs32 = test::nan_tensor({b, h, t, t});
      attention_forward(qkv.half, h, out16, probs16);
      attention_forward(qkv.f32, h, out32, probs32);
      EXPECT_TRUE(half_close(out16, out32, dt));
      EXPECT_TRUE(half_close(probs16, probs32, dt));
      Tensor dqkv16 = test::nan_half({b, t, 3 * c}, dt), dqkv32 = test::nan_tensor({b, t, 3 * c});
      attention_backward(dout.half, qkv.half, probs16, h, dqkv16);
      attention_backward(dout.f32, qkv.f32, test::cast_to(probs16, DType::kF32), h, dqkv32);
      EXPECT_TRUE(half_close(dqkv16, dqkv32, dt));
    }
}

TEST(Attention, HalfDtypesMustNotMix) {
  auto t = [](Shape s, DType d) { return Tensor::zeros(s, d); };
  Tensor out = t({2, 5, 12}, DType::kBF16), probs = t({2, 4, 5, 5}, DType::kF16);
  EXPECT_TRUE(throws_error([&] { attention_forward(t({2, 5, 36}, DType::kBF16), 4, out, probs); },
                           ErrorKind::kDTypeMismatch, {"attention_forward", "'probs' is f16", "'qkv' is bf16"}));
  Tensor dqkv = t({2, 5, 36}, DType::kF16);
  EXPECT_TRUE(throws_error([&] { attention_backward(t({2, 5, 12}, DType::kF32), t({2, 5, 36}, DType::kF16), probs, 4,
                                                    dqkv); },
                           ErrorKind::kDTypeMismatch, {"attention_backward", "'qkv' is f16", "'dout' is f32"}));
}

TEST(Attention, Errors) {
  auto t = [](Shape s, DType d = DType::kF32) { return Tensor::zeros(s, d); };
  Tensor out = t({2, 5, 12}), probs = t({2, 5, 5, 5});
  // n_head must divide C.
  EXPECT_TRUE(throws_error([&] { attention_forward(t({2, 5, 36}), 5, out, probs); }, ErrorKind::kShapeMismatch,
                           {"attention_forward", "n_head=5", "C=12"}));
  EXPECT_TRUE(throws_error([&] { attention_forward(t({2, 5, 36}), 0, out, probs); }, ErrorKind::kShapeMismatch,
                           {"n_head=0"}));
  Tensor dqkv = t({2, 5, 36});
  EXPECT_TRUE(throws_error([&] { attention_backward(out, t({2, 5, 36}), probs, 7, dqkv); }, ErrorKind::kShapeMismatch,
                           {"attention_backward", "n_head=7", "C=12"}));
  // qkv's last dimension must be 3C; it must be 3-d and f32.
  EXPECT_TRUE(throws_error([&] { attention_forward(t({2, 5, 35}), 1, out, probs); }, ErrorKind::kShapeMismatch,
                           {"3*C", "[2, 5, 35]"}));
  EXPECT_TRUE(throws_error([&] { attention_forward(t({10, 36}), 1, out, probs); }, ErrorKind::kShapeMismatch, {"3-d"}));
  EXPECT_TRUE(throws_error([&] { attention_forward(t({2, 5, 36}, DType::kF16), 1, out, probs); },
                           ErrorKind::kDTypeMismatch, {"f16"}));
  // Output shapes.
  Tensor probs_wrong = t({2, 1, 5, 5});
  EXPECT_TRUE(throws_error([&] { attention_forward(t({2, 5, 36}), 5 - 1, out, probs_wrong); },
                           ErrorKind::kShapeMismatch, {"'probs'", "[2, 4, 5, 5]"}));
  Tensor out_wrong = t({2, 5, 36});
  Tensor probs4 = t({2, 4, 5, 5});
  EXPECT_TRUE(throws_error([&] { attention_forward(t({2, 5, 36}), 4, out_wrong, probs4); }, ErrorKind::kShapeMismatch,
                           {"'out'", "[2, 5, 12]"}));
  Tensor dqkv_wrong = t({2, 5, 12});
  EXPECT_TRUE(throws_error([&] { attention_backward(out, t({2, 5, 36}), probs4, 4, dqkv_wrong); },
                           ErrorKind::kShapeMismatch, {"'dqkv'"}));
  EXPECT_TRUE(throws_error([&] { attention_backward(t({2, 4, 12}), t({2, 5, 36}), probs4, 4, dqkv); },
                           ErrorKind::kShapeMismatch, {"'dout'"}));
}

}  // namespace
}  // namespace ht::ops
