// Element-wise product and its backward: same-shape and row-broadcast
// operands against scalar references, finite differences, aliasing, skipped
// gradients, thread-count independence of the column sums, 16-bit dtypes and
// argument errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "half_util.h"
#include "ht/ops/elementwise.h"
#include "test_util.h"

namespace ht::ops::mul_test {
namespace {

using test::all_close;
using test::finite_diff_grad;
using test::random_tensor;
using test::throws_error;

// a's shapes; b is a's shape or (a's last dimension). Zero rows, one row,
// C = 1, primes, more rows than one 64-row block of the column sums, 3-d.
const Shape kShapes[] = {{0, 5}, {1, 1}, {1, 7}, {5, 1}, {3, 7}, {17, 65}, {130, 3}, {2, 3, 13}, {4, 0}, {9}, {}};

std::int64_t last_dim(const Shape& s) { return s.empty() ? 1 : s.back(); }

using Values = std::vector<double>;

// L = sum w * a * b (b repeated over a's rows when it is shorter): the loss
// whose gradients mul_backward gives for dy = w.
double product_loss(const Values& w, const Values& a, const Values& b) {
  double l = 0;
  for (std::size_t i = 0; i < a.size(); ++i) l += w[i] * a[i] * b[i % b.size()];
  return l;
}

// dL/da and dL/db of product_loss by central differences.
Values fd_grad_a(const Values& w, const Values& a, const Values& b) {
  return finite_diff_grad([&](const Values& x) { return product_loss(w, x, b); }, a);
}
Values fd_grad_b(const Values& w, const Values& a, const Values& b) {
  return finite_diff_grad([&](const Values& x) { return product_loss(w, a, x); }, b);
}

TEST(Mul, SameShapeExactAndMayAlias) {
  std::mt19937 rng(61);
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(shape_str(s));
    Tensor a = random_tensor(s, rng), b = random_tensor(s, rng), out = test::nan_tensor(s);
    mul(a, b, out);
    const auto va = a.to_vector<float>(), vb = b.to_vector<float>(), vo = out.to_vector<float>();
    for (std::size_t i = 0; i < vo.size(); ++i) ASSERT_EQ(vo[i], va[i] * vb[i]) << "element " << i;
    Tensor in_a = a.clone(), in_b = b.clone();
    mul(in_a, b, in_a);  // out aliases a
    mul(a, in_b, in_b);  // out aliases b
    EXPECT_EQ(in_a.to_vector<float>(), vo);
    EXPECT_EQ(in_b.to_vector<float>(), vo);
  }
}

TEST(Mul, RowVectorBroadcastsOverAllLeadingDimensions) {
  std::mt19937 rng(62);
  for (const Shape& s : kShapes) {
    if (s.size() < 2) continue;  // a 1-d a with b (C) is the same-shape case
    SCOPED_TRACE(shape_str(s));
    const std::int64_t c = last_dim(s);
    Tensor a = random_tensor(s, rng), b = random_tensor({c}, rng), out = test::nan_tensor(s);
    mul(a, b, out);
    const auto va = a.to_vector<float>(), vb = b.to_vector<float>(), vo = out.to_vector<float>();
    for (std::size_t i = 0; i < vo.size(); ++i)
      ASSERT_EQ(vo[i], va[i] * vb[i % std::size_t(c)]) << "element " << i;
    mul(a, b, a);  // out aliases a
    EXPECT_EQ(a.to_vector<float>(), vo);
  }
}

TEST(MulBackward, SameShapeIsExactAndMatchesFiniteDifferences) {
  std::mt19937 rng(63);
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(shape_str(s));
    Tensor dy = random_tensor(s, rng), a = random_tensor(s, rng), b = random_tensor(s, rng);
    Tensor da = test::nan_tensor(s), db = test::nan_tensor(s);
    mul_backward(dy, a, b, &da, &db);
    const auto vdy = dy.to_vector<float>(), va = a.to_vector<float>(), vb = b.to_vector<float>();
    const auto vda = da.to_vector<float>(), vdb = db.to_vector<float>();
    for (std::size_t i = 0; i < vda.size(); ++i) {
      ASSERT_EQ(vda[i], vdy[i] * vb[i]) << "da element " << i;
      ASSERT_EQ(vdb[i], vdy[i] * va[i]) << "db element " << i;
    }
    if (vda.size() > 200 || vda.empty()) continue;
    const auto w = test::to_double(dy), a0 = test::to_double(a), b0 = test::to_double(b);
    EXPECT_TRUE(all_close(vda, fd_grad_a(w, a0, b0), 1e-6, 1e-9));
    EXPECT_TRUE(all_close(vdb, fd_grad_b(w, a0, b0), 1e-6, 1e-9));
  }
}

TEST(MulBackward, BroadcastColumnSumsMatchDoubleReference) {
  std::mt19937 rng(64);
  for (std::int64_t rows : {0, 1, 2, 63, 64, 65, 131, 1000})
    for (std::int64_t c : {1, 3, 64, 257}) {
      SCOPED_TRACE(::testing::Message() << rows << "x" << c);
      Tensor dy = random_tensor({rows, c}, rng, -2.f, 2.f), a = random_tensor({rows, c}, rng, -2.f, 2.f);
      Tensor b = random_tensor({c}, rng);
      Tensor da = test::nan_tensor({rows, c}), db = test::nan_tensor({c});
      mul_backward(dy, a, b, &da, &db);
      const auto vdy = dy.to_vector<float>(), va = a.to_vector<float>(), vb = b.to_vector<float>();
      const auto vda = da.to_vector<float>();
      std::vector<double> want(std::size_t(c), 0.0), magnitude(std::size_t(c), 0.0);
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t j = 0; j < c; ++j) {
          const std::size_t i = std::size_t(r * c + j);
          ASSERT_EQ(vda[i], vdy[i] * vb[std::size_t(j)]) << "da element " << i;
          want[std::size_t(j)] += double(vdy[i]) * double(va[i]);
          magnitude[std::size_t(j)] += std::abs(double(vdy[i]) * double(va[i]));
        }
      // Exact products summed in double: only the final rounding to f32 is
      // visible (2^-24 relative), plus double rounding of the sum, which
      // matters only where the column cancels almost to 0.
      const auto vdb = db.to_vector<float>();
      for (std::size_t j = 0; j < vdb.size(); ++j)
        ASSERT_NEAR(vdb[j], want[j], 6e-8 * std::abs(want[j]) + 1e-14 * magnitude[j]) << "db column " << j;
      if (rows * c > 200) continue;
      const auto w = test::to_double(dy), a0 = test::to_double(a), b0 = test::to_double(b);
      EXPECT_TRUE(all_close(vdb, fd_grad_b(w, a0, b0), 1e-6, 1e-9));
      EXPECT_TRUE(all_close(vda, fd_grad_a(w, a0, b0), 1e-6, 1e-9));
    }
}

TEST(MulBackward, BroadcastOverThreeDimensions) {
  // dy, a (2, 3, 2) with b (2): db sums all 6 rows. Small integers: exact.
  Tensor dy = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {2, 3, 2});
  Tensor a = Tensor::from_vector(std::vector<float>{1, 1, 2, 2, 1, 1, 2, 2, 1, 1, 2, 2}, {2, 3, 2});
  Tensor b = Tensor::from_vector(std::vector<float>{3, -1}, {2});
  Tensor db = test::nan_tensor({2}), da = test::nan_tensor({2, 3, 2});
  mul_backward(dy, a, b, &da, &db);
  // Column 0: 1*1 + 3*2 + 5*1 + 7*2 + 9*1 + 11*2 = 57; column 1: 2 + 8 + 6 + 16 + 10 + 24 = 66.
  EXPECT_EQ(db.to_vector<float>(), (std::vector<float>{57, 66}));
  EXPECT_EQ(da.to_vector<float>(), (std::vector<float>{3, -2, 9, -4, 15, -6, 21, -8, 27, -10, 33, -12}));
}

TEST(MulBackward, SkippedGradientsAndAliasing) {
  std::mt19937 rng(65);
  for (bool broadcast : {false, true}) {
    SCOPED_TRACE(broadcast ? "broadcast" : "same shape");
    const Shape sb = broadcast ? Shape{9} : Shape{70, 9};
    const Tensor dy = random_tensor({70, 9}, rng), a = random_tensor({70, 9}, rng), b = random_tensor(sb, rng);
    Tensor da = test::nan_tensor({70, 9}), db = test::nan_tensor(sb);
    mul_backward(dy, a, b, &da, &db);
    // One gradient at a time gives the same bits.
    Tensor da_only = test::nan_tensor({70, 9}), db_only = test::nan_tensor(sb);
    mul_backward(dy, a, b, &da_only, nullptr);
    mul_backward(dy, a, b, nullptr, &db_only);
    EXPECT_EQ(da_only.to_vector<float>(), da.to_vector<float>());
    EXPECT_EQ(db_only.to_vector<float>(), db.to_vector<float>());
    EXPECT_NO_THROW(mul_backward(dy, a, b, nullptr, nullptr));
    // da aliasing dy (the in-place backward), and aliasing a: db is computed first.
    Tensor g = dy.clone(), db2 = test::nan_tensor(sb);
    mul_backward(g, a, b, &g, &db2);
    EXPECT_EQ(g.to_vector<float>(), da.to_vector<float>());
    EXPECT_EQ(db2.to_vector<float>(), db.to_vector<float>());
    Tensor a2 = a.clone(), db3 = test::nan_tensor(sb);
    mul_backward(dy, a2, b, &a2, &db3);
    EXPECT_EQ(a2.to_vector<float>(), da.to_vector<float>());
    EXPECT_EQ(db3.to_vector<float>(), db.to_vector<float>());
  }
}

#if defined(_OPENMP)
TEST(MulBackward, ColumnSumsSameBitsWithOneAndTwoThreads) {
  std::mt19937 rng(66);
  for (const Shape& s : {Shape{5000, 300}, Shape{100003, 3}, Shape{2, 77, 1}}) {
    const Tensor dy = random_tensor(s, rng), a = random_tensor(s, rng), b = random_tensor({s.back()}, rng);
    std::vector<std::vector<float>> got;
    for (int threads : {1, 2}) {
      Tensor db = Tensor::empty({s.back()}, DType::kF32);
      test::with_omp_threads(threads, [&] { mul_backward(dy, a, b, nullptr, &db); });
      got.push_back(db.to_vector<float>());
    }
    EXPECT_EQ(std::memcmp(got[0].data(), got[1].data(), got[0].size() * 4), 0) << shape_str(s);
  }
}
#endif

TEST(Mul, HalfMatchesF32OnTheSameValues) {
  std::mt19937 rng(67);
  for (DType dt : test::kHalfDtypes)
    for (bool broadcast : {false, true}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << (broadcast ? " broadcast" : " same shape"));
      const Shape s{37, 33}, sb = broadcast ? Shape{33} : s;
      const auto a = test::random_half(s, dt, rng), b = test::random_half(sb, dt, rng);
      const auto dy = test::random_half(s, dt, rng);
      Tensor o16 = test::nan_half(s, dt), o32 = test::nan_tensor(s);
      mul(a.half, b.half, o16);
      mul(a.f32, b.f32, o32);
      EXPECT_TRUE(test::rounded_once(o16, o32));
      Tensor da16 = test::nan_half(s, dt), db16 = test::nan_half(sb, dt);
      Tensor da32 = test::nan_tensor(s), db32 = test::nan_tensor(sb);
      mul_backward(dy.half, a.half, b.half, &da16, &db16);
      mul_backward(dy.f32, a.f32, b.f32, &da32, &db32);
      EXPECT_TRUE(test::rounded_once(da16, da32));
      EXPECT_TRUE(test::rounded_once(db16, db32));
      // In place in 16 bits: da aliasing dy.
      Tensor g = test::cast_to(dy.half, dt), db_in = test::nan_half(sb, dt);
      mul_backward(g, a.half, b.half, &g, &db_in);
      EXPECT_TRUE(test::rounded_once(g, da32));
      EXPECT_TRUE(test::rounded_once(db_in, db32));
    }
}

TEST(Mul, Errors) {
  auto t = [](Shape s, DType d = DType::kF32) { return Tensor::zeros(s, d); };
  Tensor out = t({2, 3});
  EXPECT_TRUE(throws_error([&] { mul(t({2, 3}), t({2}), out); }, ErrorKind::kShapeMismatch,
                           {"mul", "'b' must have a's shape [2, 3]", "1-d with a's last dimension ([3])", "got [2]"}));
  EXPECT_TRUE(throws_error([&] { mul(t({2, 3}), t({1, 3}), out); }, ErrorKind::kShapeMismatch, {"got [1, 3]"}));
  Tensor scalar = t({});
  EXPECT_TRUE(throws_error([&] { mul(t({}), t({1}), scalar); }, ErrorKind::kShapeMismatch,
                           {"'b' must have a's shape []", "0-d", "got [1]"}));
  Tensor wrong = t({3, 2});
  EXPECT_TRUE(throws_error([&] { mul(t({2, 3}), t({3}), wrong); }, ErrorKind::kShapeMismatch,
                           {"mul", "'out' must have shape [2, 3]", "got [3, 2]"}));
  Tensor out16 = t({2, 3}, DType::kF16);
  EXPECT_TRUE(throws_error([&] { mul(t({2, 3}), t({3}), out16); }, ErrorKind::kDTypeMismatch,
                           {"mul", "'out' is f16", "'a' is f32"}));
  EXPECT_TRUE(throws_error([&] { mul(t({2, 3}), t({3}, DType::kI32), out); }, ErrorKind::kDTypeMismatch,
                           {"'b' must be f32, f16 or bf16", "i32"}));
  Tensor undefined;
  EXPECT_TRUE(throws_error([&] { mul(t({2, 3}), undefined, out); }, ErrorKind::kInvalidArgument,
                           {"mul", "'b' is undefined"}));

  Tensor da = t({2, 3}), db = t({3}), db_bad = t({2, 3}), db16 = t({3}, DType::kBF16);
  EXPECT_TRUE(throws_error([&] { mul_backward(t({3, 2}), t({2, 3}), t({3}), &da, &db); }, ErrorKind::kShapeMismatch,
                           {"mul_backward", "'dy' must have shape [2, 3]", "got [3, 2]"}));
  EXPECT_TRUE(throws_error([&] { mul_backward(t({2, 3}), t({2, 3}), t({3}), &da, &db_bad); },
                           ErrorKind::kShapeMismatch, {"mul_backward", "'db' must have shape [3]", "got [2, 3]"}));
  EXPECT_TRUE(throws_error([&] { mul_backward(t({2, 3}), t({2, 3}), t({3}), &db, nullptr); },
                           ErrorKind::kShapeMismatch, {"'da' must have shape [2, 3]", "got [3]"}));
  EXPECT_TRUE(throws_error([&] { mul_backward(t({2, 3}), t({2, 3}), t({4}), &da, &db); }, ErrorKind::kShapeMismatch,
                           {"mul_backward", "'b' must have a's shape [2, 3]", "got [4]"}));
  EXPECT_TRUE(throws_error([&] { mul_backward(t({2, 3}), t({2, 3}), t({3}), nullptr, &db16); },
                           ErrorKind::kDTypeMismatch, {"mul_backward", "'db' is bf16", "'dy' is f32"}));
  EXPECT_TRUE(throws_error([&] { mul_backward(t({2, 3}), t({2, 3}), t({3}), &undefined, nullptr); },
                           ErrorKind::kInvalidArgument, {"mul_backward", "'da' is undefined"}));
}

}  // namespace
}  // namespace ht::ops::mul_test
