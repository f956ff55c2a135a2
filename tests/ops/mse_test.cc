// Mean-squared error against a double-precision reference; backward
// analytically and by finite differences; aliasing, determinism across
// thread counts, 16-bit dtypes and argument errors.
#include "ht/ops/mse.h"

#include <gtest/gtest.h>

#include <cstring>

#include "half_util.h"
#include "test_util.h"

namespace ht::ops::mse_test {
namespace {

using test::all_close;
using test::finite_diff_grad;
using test::random_tensor;
using test::throws_error;

double mse_ref(const std::vector<double>& p, const std::vector<double>& t) {
  double s = 0;
  for (std::size_t i = 0; i < p.size(); ++i) s += (p[i] - t[i]) * (p[i] - t[i]);
  return s / double(p.size());
}

const Shape kShapes[] = {{1}, {7}, {3, 5}, {2, 3, 4}, {16385}, {3, 40000}};  // one and several chunks of 16K

TEST(Mse, ForwardMatchesDoubleReference) {
  std::mt19937 rng(81);
  for (const Shape& shape : kShapes) {
    SCOPED_TRACE(shape_str(shape));
    Tensor p = random_tensor(shape, rng, -3.f, 3.f), t = random_tensor(shape, rng, -3.f, 3.f);
    Tensor loss = test::nan_tensor({1});
    mse_forward(p, t, loss);
    EXPECT_TRUE(all_close(loss.to_vector<float>(), {mse_ref(test::to_double(p), test::to_double(t))}, 1e-7));
  }
  // A known value: errors 1, -2, 3 -> (1 + 4 + 9) / 3.
  Tensor loss = test::nan_tensor({1});
  mse_forward(Tensor::from_vector(std::vector<float>{2, 0, 5}, {3}), Tensor::from_vector(std::vector<float>{1, 2, 2}, {3}),
              loss);
  EXPECT_EQ(loss.item(0), 14.f / 3.f);
}

TEST(Mse, BackwardMatchesFiniteDifferencesAndMayAliasPred) {
  std::mt19937 rng(82);
  for (const Shape& shape : {Shape{1}, Shape{7}, Shape{3, 5}}) {
    SCOPED_TRACE(shape_str(shape));
    Tensor p = random_tensor(shape, rng), t = random_tensor(shape, rng), dp = test::nan_tensor(shape);
    const float dloss = 0.75f;
    mse_backward(p, t, dloss, dp);
    const auto vt = test::to_double(t);
    const auto want = finite_diff_grad([&](const std::vector<double>& x) { return dloss * mse_ref(x, vt); },
                                       test::to_double(p));
    EXPECT_TRUE(all_close(dp.to_vector<float>(), want, 1e-6, 1e-9));
    Tensor in_place = p.clone();
    mse_backward(in_place, t, dloss, in_place);
    EXPECT_EQ(in_place.to_vector<float>(), dp.to_vector<float>());
  }
  // Large: against 2 (p - t) / n * dloss element by element.
  Tensor p = random_tensor({40009}, rng), t = random_tensor({40009}, rng), dp = test::nan_tensor({40009});
  mse_backward(p, t, 1.f, dp);
  const auto vp = test::to_double(p), vt = test::to_double(t);
  std::vector<double> want(vp.size());
  for (std::size_t i = 0; i < vp.size(); ++i) want[i] = 2.0 * (vp[i] - vt[i]) / double(vp.size());
  EXPECT_TRUE(all_close(dp.to_vector<float>(), want, 1e-6));
}

#if defined(_OPENMP)
TEST(Mse, SameBitsWithOneAndTwoThreads) {
  std::mt19937 rng(83);
  Tensor p = random_tensor({100003}, rng), t = random_tensor({100003}, rng);
  std::vector<float> losses;
  for (int threads : {1, 2}) {
    Tensor loss = Tensor::empty({1}, DType::kF32);
    test::with_omp_threads(threads, [&] { mse_forward(p, t, loss); });
    losses.push_back(loss.item(0));
  }
  EXPECT_EQ(std::memcmp(&losses[0], &losses[1], sizeof(float)), 0);
}
#endif

TEST(Mse, HalfMatchesF32OnTheSameValues) {
  std::mt19937 rng(84);
  for (DType dt : test::kHalfDtypes) {
    SCOPED_TRACE(dtype_name(dt));
    const auto p = test::random_half({5, 33}, dt, rng), t = test::random_half({5, 33}, dt, rng);
    Tensor l16 = test::nan_tensor({1}), l32 = test::nan_tensor({1});
    mse_forward(p.half, t.half, l16);
    mse_forward(p.f32, t.f32, l32);
    EXPECT_EQ(l16.item(0), l32.item(0));  // f32 loss from the same (widened) values
    Tensor d16 = test::nan_half({5, 33}, dt), d32 = test::nan_tensor({5, 33});
    mse_backward(p.half, t.half, 2.f, d16);
    mse_backward(p.f32, t.f32, 2.f, d32);
    EXPECT_TRUE(test::rounded_once(d16, d32));
  }
}

TEST(Mse, Errors) {
  auto t = [](Shape s, DType d = DType::kF32) { return Tensor::zeros(s, d); };
  Tensor loss = t({1}), loss2 = t({2}), loss16 = t({1}, DType::kF16);
  EXPECT_TRUE(throws_error([&] { mse_forward(t({3, 4}), t({4, 3}), loss); }, ErrorKind::kShapeMismatch,
                           {"mse_forward", "'target' must have shape [3, 4]", "[4, 3]"}));
  EXPECT_TRUE(throws_error([&] { mse_forward(t({3}), t({3}), loss2); }, ErrorKind::kShapeMismatch,
                           {"'loss' must have 1 elements"}));
  EXPECT_TRUE(throws_error([&] { mse_forward(t({3}), t({3}), loss16); }, ErrorKind::kDTypeMismatch,
                           {"'loss' must be f32"}));
  EXPECT_TRUE(throws_error([&] { mse_forward(t({0, 3}), t({0, 3}), loss); }, ErrorKind::kInvalidArgument,
                           {"empty"}));
  EXPECT_TRUE(throws_error([&] { mse_forward(t({3}, DType::kBF16), t({3}), loss); }, ErrorKind::kDTypeMismatch,
                           {"'target' is f32", "'pred' is bf16"}));
  Tensor dp = t({4});
  EXPECT_TRUE(throws_error([&] { mse_backward(t({3}), t({3}), 1.f, dp); }, ErrorKind::kShapeMismatch,
                           {"mse_backward", "'dpred' must have shape [3]"}));
}

}  // namespace
}  // namespace ht::ops::mse_test
