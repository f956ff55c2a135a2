// Fused softmax cross-entropy: losses and log-sum-exp against a double
// reference, dlogits = (softmax - onehot) * dloss and against finite
// differences, numerical stability, aliasing, and targets out of range.
#include "ht/ops/cross_entropy.h"

#include <gtest/gtest.h>

#include <cmath>

#include "test_util.h"

namespace ht::ops {
namespace {

using test::all_close;
using test::finite_diff_grad;
using test::random_tensor;
using test::throws_error;

Tensor random_targets(std::int64_t n, std::int64_t vocab, std::mt19937& rng) {
  std::uniform_int_distribution<std::int32_t> dist(0, std::int32_t(vocab - 1));
  std::vector<std::int32_t> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = dist(rng);
  return Tensor::from_vector(v, {n});
}

// Per-row log-sum-exp of logits (n, v), in double.
std::vector<double> lse_ref(const std::vector<double>& logits, std::int64_t n, std::int64_t v) {
  std::vector<double> out(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    const double* row = logits.data() + i * v;
    const double mx = *std::max_element(row, row + v);
    double s = 0;
    for (std::int64_t j = 0; j < v; ++j) s += std::exp(row[j] - mx);
    out[std::size_t(i)] = mx + std::log(s);
  }
  return out;
}

struct Case {
  std::int64_t n, v;
};
const Case kCases[] = {{0, 5}, {1, 1}, {1, 2}, {3, 7}, {8, 64}, {5, 257}, {13, 1000}};

TEST(CrossEntropy, ForwardMatchesDoubleReference) {
  std::mt19937 rng(41);
  for (auto [n, v] : kCases) {
    for (float offset : {0.f, 80.f}) {  // 80: exp would overflow without the max shift
      SCOPED_TRACE(::testing::Message() << n << "x" << v << " offset " << offset);
      Tensor logits = random_tensor({n, v}, rng, offset - 4.f, offset + 4.f);
      Tensor targets = random_targets(n, v, rng);
      Tensor losses = test::nan_tensor({n}), lse = test::nan_tensor({n});
      cross_entropy_forward(logits, targets, losses, lse);
      const auto vl = test::to_double(logits);
      const auto want_lse = lse_ref(vl, n, v);
      const auto tg = targets.to_vector<std::int32_t>();
      std::vector<double> want_loss(static_cast<std::size_t>(n));
      for (std::int64_t i = 0; i < n; ++i)
        want_loss[std::size_t(i)] = want_lse[std::size_t(i)] - vl[std::size_t(i * v + tg[std::size_t(i)])];
      // lse is near the offset, the loss near log(V): compare each with its own scale.
      EXPECT_TRUE(all_close(lse.to_vector<float>(), want_lse, 1e-6));
      EXPECT_TRUE(all_close(losses.to_vector<float>(), want_loss, 1e-5, 1e-5 * (1 + offset)));
      for (float l : losses.to_vector<float>()) EXPECT_TRUE(std::isfinite(l));
    }
  }
}

TEST(CrossEntropy, KnownValues) {
  // Uniform logits: loss = log(V). V = 1: loss 0.
  Tensor logits = Tensor::zeros({2, 4}, DType::kF32);
  Tensor targets = Tensor::from_vector(std::vector<std::int32_t>{0, 3}, {2});
  Tensor losses = Tensor::empty({2}, DType::kF32), lse = Tensor::empty({2}, DType::kF32);
  cross_entropy_forward(logits, targets, losses, lse);
  EXPECT_FLOAT_EQ(losses.item(0), std::log(4.f));
  EXPECT_FLOAT_EQ(losses.item(1), std::log(4.f));
  Tensor one = Tensor::from_vector(std::vector<float>{7.5f}, {1, 1});
  Tensor t0 = Tensor::from_vector(std::vector<std::int32_t>{0}, {1});
  Tensor l1 = Tensor::empty({1}, DType::kF32), s1 = Tensor::empty({1}, DType::kF32);
  cross_entropy_forward(one, t0, l1, s1);
  EXPECT_EQ(l1.item(), 0.f);
  EXPECT_EQ(s1.item(), 7.5f);
}

TEST(CrossEntropy, BackwardIsSoftmaxMinusOnehotTimesDloss) {
  std::mt19937 rng(42);
  for (auto [n, v] : kCases) {
    SCOPED_TRACE(::testing::Message() << n << "x" << v);
    Tensor logits = random_tensor({n, v}, rng, -3.f, 3.f);
    Tensor targets = random_targets(n, v, rng);
    Tensor losses = Tensor::empty({n}, DType::kF32), lse = Tensor::empty({n}, DType::kF32);
    cross_entropy_forward(logits, targets, losses, lse);
    const float dloss = n ? 1.f / float(n) : 1.f;  // a mean over rows
    Tensor dlogits = test::nan_tensor({n, v});  // overwritten
    cross_entropy_backward(logits, targets, lse, dloss, dlogits);

    const auto vl = test::to_double(logits);
    const auto tg = targets.to_vector<std::int32_t>();
    const auto l = lse_ref(vl, n, v);
    std::vector<double> want(vl.size());
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = 0; j < v; ++j) {
        const std::size_t k = std::size_t(i * v + j);
        want[k] = (std::exp(vl[k] - l[std::size_t(i)]) - (j == tg[std::size_t(i)] ? 1.0 : 0.0)) * dloss;
      }
    EXPECT_TRUE(all_close(dlogits.to_vector<float>(), want, 1e-5));

    // The same against finite differences of the mean loss, for the small cases.
    if (n * v <= 600) {
      const auto fd = finite_diff_grad(
          [&](const std::vector<double>& x) {
            const auto lx = lse_ref(x, n, v);
            double total = 0;
            for (std::int64_t i = 0; i < n; ++i)
              total += lx[std::size_t(i)] - x[std::size_t(i * v + tg[std::size_t(i)])];
            return total * dloss;
          },
          vl);
      EXPECT_TRUE(all_close(dlogits.to_vector<float>(), fd, 1e-5)) << "finite differences";
    }
    // Each row of the gradient sums to zero.
    const auto got = dlogits.to_vector<float>();
    for (std::int64_t i = 0; i < n; ++i) {
      double s = 0;
      for (std::int64_t j = 0; j < v; ++j) s += got[std::size_t(i * v + j)];
      EXPECT_NEAR(s, 0.0, 1e-6);
    }
  }
}

TEST(CrossEntropy, BackwardInPlaceOverLogits) {
  std::mt19937 rng(43);
  const std::int64_t n = 6, v = 33;
  Tensor logits = random_tensor({n, v}, rng, -2.f, 2.f);
  Tensor targets = random_targets(n, v, rng);
  Tensor losses = Tensor::empty({n}, DType::kF32), lse = Tensor::empty({n}, DType::kF32);
  cross_entropy_forward(logits, targets, losses, lse);
  Tensor separate = Tensor::empty({n, v}, DType::kF32);
  cross_entropy_backward(logits, targets, lse, 0.25f, separate);
  cross_entropy_backward(logits, targets, lse, 0.25f, logits);  // dlogits aliases logits
  EXPECT_EQ(logits.to_vector<float>(), separate.to_vector<float>());
}

TEST(CrossEntropy, TargetOutOfRangeNamesIt) {
  Tensor logits = Tensor::zeros({3, 10}, DType::kF32), losses = Tensor::zeros({3}, DType::kF32);
  Tensor lse = Tensor::zeros({3}, DType::kF32);
  Tensor big = Tensor::from_vector(std::vector<std::int32_t>{1, 2, 10}, {3});
  EXPECT_TRUE(throws_error([&] { cross_entropy_forward(logits, big, losses, lse); }, ErrorKind::kOutOfRange,
                           {"target 10", "row 2", "[0, 10)"}));
  Tensor neg = Tensor::from_vector(std::vector<std::int32_t>{-3, 2, 1}, {3});
  EXPECT_TRUE(throws_error([&] { cross_entropy_forward(logits, neg, losses, lse); }, ErrorKind::kOutOfRange,
                           {"target -3", "row 0"}));
  Tensor dlogits = Tensor::zeros({3, 10}, DType::kF32);
  EXPECT_TRUE(throws_error([&] { cross_entropy_backward(logits, big, lse, 1.f, dlogits); }, ErrorKind::kOutOfRange,
                           {"target 10"}));
}

TEST(CrossEntropy, ShapeAndDtypeErrors) {
  auto t = [](Shape s, DType d = DType::kF32) { return Tensor::zeros(s, d); };
  Tensor losses = t({3}), lse = t({3});
  EXPECT_TRUE(throws_error([&] { cross_entropy_forward(t({3, 10}), t({3}), losses, lse); }, ErrorKind::kDTypeMismatch,
                           {"'targets'", "i32"}));
  EXPECT_TRUE(throws_error([&] { cross_entropy_forward(t({3, 10}), t({4}, DType::kI32), losses, lse); },
                           ErrorKind::kShapeMismatch, {"'targets'", "[3]", "[4]"}));
  EXPECT_TRUE(throws_error([&] { cross_entropy_forward(t({3, 2, 5}), t({3}, DType::kI32), losses, lse); },
                           ErrorKind::kShapeMismatch, {"'logits'", "2-d"}));
  EXPECT_TRUE(throws_error([&] { cross_entropy_forward(t({3, 10}, DType::kF16), t({3}, DType::kI32), losses, lse); },
                           ErrorKind::kDTypeMismatch, {"'logits'"}));
  Tensor losses2 = t({2});
  EXPECT_TRUE(throws_error([&] { cross_entropy_forward(t({3, 10}), t({3}, DType::kI32), losses2, lse); },
                           ErrorKind::kShapeMismatch, {"'losses'"}));
  Tensor dl = t({3, 9});
  EXPECT_TRUE(throws_error([&] { cross_entropy_backward(t({3, 10}), t({3}, DType::kI32), lse, 1.f, dl); },
                           ErrorKind::kShapeMismatch, {"'dlogits'", "[3, 10]"}));
}

}  // namespace
}  // namespace ht::ops
