// Slices, transposes and softmaxes on the host: known values (i32 moves as
// bits), round trips, and the errors that name what is wrong. Their values
// against PyTorch, forward and backward, are ops_torch_check.py's; CUDA
// against these drivers, ops_cuda_test's.
#include <gtest/gtest.h>

#include <numeric>

#include "ht/ops/movement.h"
#include "ht/ops/softmax.h"
#include "test_util.h"

namespace ht::ops::movement_test {
namespace {

using test::throws_error;

Tensor iota(const Shape& shape) {
  std::vector<std::int32_t> v(std::size_t(shape_numel(shape)));
  std::iota(v.begin(), v.end(), 0);
  return Tensor::from_vector(v, shape);
}

TEST(Movement, NarrowAndNarrowIntoKnownValues) {
  const Tensor x = iota({2, 3, 2});  // [[0 1][2 3][4 5]], [[6 7][8 9][10 11]]
  Tensor part = Tensor::empty({2, 2, 2}, DType::kI32);
  narrow(x, 1, 1, part);
  EXPECT_EQ(part.to_vector<std::int32_t>(), (std::vector<std::int32_t>{2, 3, 4, 5, 8, 9, 10, 11}));
  Tensor whole = Tensor::zeros({2, 3, 2}, DType::kI32);
  narrow_into(part, -2, 0, whole);
  EXPECT_EQ(whole.to_vector<std::int32_t>(), (std::vector<std::int32_t>{2, 3, 4, 5, 0, 0, 8, 9, 10, 11, 0, 0}));
}

TEST(Movement, TransposeKnownValuesAndRoundTrip) {
  const Tensor x = iota({2, 3, 4});
  Tensor t = Tensor::empty({4, 3, 2}, DType::kI32);
  transpose(x, 0, 2, t);
  // t[k][j][i] = x[i][j][k] = 12 i + 4 j + k.
  const auto tv = t.to_vector<std::int32_t>();
  for (int k = 0; k < 4; ++k)
    for (int j = 0; j < 3; ++j)
      for (int i = 0; i < 2; ++i) EXPECT_EQ(tv[std::size_t((k * 3 + j) * 2 + i)], 12 * i + 4 * j + k);
  Tensor back = Tensor::empty({2, 3, 4}, DType::kI32);
  transpose(t, 2, 0, back);
  EXPECT_EQ(back.to_vector<std::int32_t>(), x.to_vector<std::int32_t>());
}

TEST(Movement, ErrorsNameTheProblem) {
  const Tensor x = iota({2, 3});
  Tensor part = Tensor::empty({2, 2}, DType::kI32);
  EXPECT_TRUE(throws_error([&] { narrow(x, 1, 2, part); }, ErrorKind::kOutOfRange, {"[2, 4)", "size 3"}));
  Tensor wrong = Tensor::empty({3, 2}, DType::kI32);
  EXPECT_TRUE(throws_error([&] { narrow(x, 1, 0, wrong); }, ErrorKind::kShapeMismatch, {"[2, 3]", "[3, 2]"}));
  EXPECT_TRUE(throws_error([&] { narrow(x, 2, 0, part); }, ErrorKind::kInvalidArgument, {"dim 2"}));
  Tensor f = Tensor::empty({2, 2}, DType::kF32);
  EXPECT_TRUE(throws_error([&] { narrow(x, 1, 0, f); }, ErrorKind::kDTypeMismatch, {"i32", "f32"}));
  Tensor t = Tensor::empty({2, 3}, DType::kI32);
  EXPECT_TRUE(throws_error([&] { transpose(x, 0, 1, t); }, ErrorKind::kShapeMismatch, {"out"}));
}

TEST(Softmax, RowsAndTheirBackward) {
  const Tensor x = Tensor::from_vector(std::vector<float>{0, 0, 1, 2, 3, -1000}, {2, 3});
  Tensor y = Tensor::empty({2, 3}, DType::kF32), ly = Tensor::empty({2, 3}, DType::kF32);
  softmax_forward(x, y);
  softmax_forward(x, ly, /*log=*/true);
  const auto p = y.to_vector<float>(), lp = ly.to_vector<float>();
  const double e = std::exp(1.0), z = 2 + e, z2 = std::exp(-1.0) + 1.0;  // row 1 shifted by its max 3
  EXPECT_NEAR(p[0], 1 / z, 1e-7);
  EXPECT_NEAR(p[2], e / z, 1e-7);
  EXPECT_NEAR(p[4], 1 / z2, 1e-7);
  EXPECT_EQ(p[5], 0.f);
  EXPECT_NEAR(lp[2], 1 - std::log(z), 1e-6);
  EXPECT_NEAR(lp[5], -1003 - std::log(z2), 1e-3);
  // A gradient along the softmax's own direction (dy constant in a row) is
  // lost in softmax and gives dy - exp(y) * sum(dy) in log-softmax.
  const Tensor dy = Tensor::from_vector(std::vector<float>{1, 1, 1, 2, 2, 2}, {2, 3});
  Tensor dx = Tensor::empty({2, 3}, DType::kF32);
  softmax_backward(y, dy, dx);
  for (float v : dx.to_vector<float>()) EXPECT_NEAR(v, 0.f, 1e-7);
  softmax_backward(ly, dy, dx, /*log=*/true);
  EXPECT_NEAR(dx.to_vector<float>()[0], 1 - 3 / z, 1e-6);
}

}  // namespace
}  // namespace ht::ops::movement_test
