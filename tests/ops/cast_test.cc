// Precision ops: casts between f32, f16 and bf16 (bit-exact against the
// conversions of ht/core/half.h, which half_test checks against independent
// references), scale_and_check_finite, and sum_squares.
#include "ht/ops/cast.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "test_util.h"

namespace ht::ops::cast_test {
namespace {

using test::random_tensor;
using test::throws_error;

constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<std::uint16_t> bits16(const Tensor& t) {
  std::vector<std::uint16_t> out(std::size_t(t.numel()));
  if (t.numel()) std::memcpy(out.data(), t.data_ptr(), out.size() * 2);
  return out;
}

Tensor all_16bit_patterns(DType dtype) {
  Tensor t = Tensor::empty({65536}, dtype);
  auto* p = static_cast<std::uint16_t*>(t.data_ptr());
  for (std::uint32_t b = 0; b < 65536; ++b) p[b] = std::uint16_t(b);
  return t;
}

TEST(Cast, F32ToHalfMatchesScalarConversions) {
  std::mt19937 rng(51);
  std::uniform_int_distribution<std::uint32_t> any;
  std::vector<float> v;
  for (int i = 0; i < 200000; ++i) {
    std::uint32_t u = any(rng);
    if (i % 2) u = (u & 0x807fffffu) | ((100u + u % 45u) << 23);  // exponents near the f16 range
    float f;
    std::memcpy(&f, &u, 4);
    if (!std::isnan(f)) v.push_back(f);  // NaN payloads may differ; checked below
  }
  for (float f : {0.f, -0.f, 65504.f, 65520.f, 65519.99f, kInf, -kInf, 1e-8f, 3e38f}) v.push_back(f);
  Tensor src = Tensor::from_vector(v, {std::int64_t(v.size())});
  Tensor h = Tensor::empty(src.shape(), DType::kF16), b = Tensor::empty(src.shape(), DType::kBF16);
  cast(src, h);
  cast(src, b);
  const auto hb = bits16(h), bb = bits16(b);
  for (std::size_t i = 0; i < v.size(); ++i) {
    ASSERT_EQ(hb[i], to_f16(v[i]).bits) << v[i];
    ASSERT_EQ(bb[i], to_bf16(v[i]).bits) << v[i];
  }
  Tensor nan = Tensor::from_vector(std::vector<float>{NAN, -NAN}, {2});
  Tensor nh = Tensor::empty({2}, DType::kF16), nb = Tensor::empty({2}, DType::kBF16);
  cast(nan, nh);
  cast(nan, nb);
  EXPECT_TRUE(std::isnan(nh.item(0)) && std::isnan(nh.item(1)));
  EXPECT_TRUE(std::isnan(nb.item(0)) && std::isnan(nb.item(1)));
}

// Halfway points between neighbouring 16-bit values (ties, which round to the
// even one), and the floats just either side of them, for every finite f16
// and bf16 pattern: the conversion the CPU driver picks at run time (F16C
// instructions where the CPU has them, bit manipulation otherwise) must give
// the bits of the scalar conversions.
TEST(Cast, F32ToHalfRoundsTiesLikeScalarConversions) {
  for (DType dt : {DType::kF16, DType::kBF16}) {
    std::vector<float> v;
    for (std::uint32_t b = 0; b < 0x7fff; ++b) {
      const auto widen = [&](std::uint32_t x) {
        return dt == DType::kF16 ? to_float(f16{std::uint16_t(x)}) : to_float(bf16{std::uint16_t(x)});
      };
      const float lo = widen(b), hi = widen(b + 1);
      if (!std::isfinite(lo) || !std::isfinite(hi)) continue;
      const float mid = lo + (hi - lo) / 2;  // exact: one more bit than the 16-bit mantissa
      for (float f : {mid, std::nextafter(mid, 0.f), std::nextafter(mid, kInf)}) {
        v.push_back(f);
        v.push_back(-f);
      }
    }
    Tensor src = Tensor::from_vector(v, {std::int64_t(v.size())});
    Tensor dst = Tensor::empty(src.shape(), dt);
    cast(src, dst);
    const auto got = bits16(dst);
    for (std::size_t i = 0; i < v.size(); ++i)
      ASSERT_EQ(got[i], dt == DType::kF16 ? to_f16(v[i]).bits : to_bf16(v[i]).bits)
          << dtype_name(dt) << " " << v[i];
  }
}

TEST(Cast, HalfToF32IsExactForEveryPattern) {
  for (DType dt : {DType::kF16, DType::kBF16}) {
    Tensor src = all_16bit_patterns(dt);
    Tensor dst = test::nan_tensor({65536});
    cast(src, dst);
    const auto got = dst.to_vector<float>();
    for (std::uint32_t b = 0; b < 65536; ++b) {
      const float want = dt == DType::kF16 ? to_float(f16{std::uint16_t(b)}) : to_float(bf16{std::uint16_t(b)});
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(got[b])) << std::hex << b;
      } else {
        ASSERT_EQ(std::memcmp(&got[b], &want, 4), 0) << dtype_name(dt) << std::hex << " bits 0x" << b;
      }
    }
    // Widening then narrowing returns every non-NaN pattern unchanged.
    Tensor back = Tensor::empty({65536}, dt);
    cast(dst, back);
    const auto rb = bits16(back);
    for (std::uint32_t b = 0; b < 65536; ++b)
      if (!std::isnan(got[b])) {
        ASSERT_EQ(rb[b], b) << dtype_name(dt) << std::hex << " bits 0x" << b;
      }
  }
}

TEST(Cast, BetweenF16AndBF16RoundsOnce) {
  // Every f16 value is a float; f16 -> bf16 must equal to_bf16 of that float, and so on.
  for (auto [from, to] : {std::pair{DType::kF16, DType::kBF16}, std::pair{DType::kBF16, DType::kF16},
                          std::pair{DType::kF16, DType::kF16}, std::pair{DType::kBF16, DType::kBF16}}) {
    Tensor src = all_16bit_patterns(from);
    Tensor dst = Tensor::empty({65536}, to);
    cast(src, dst);
    const auto got = bits16(dst);
    for (std::uint32_t b = 0; b < 65536; ++b) {
      const float f = from == DType::kF16 ? to_float(f16{std::uint16_t(b)}) : to_float(bf16{std::uint16_t(b)});
      const std::uint16_t want = to == DType::kF16 ? to_f16(f).bits : to_bf16(f).bits;
      if (std::isnan(f)) {
        const float g = to == DType::kF16 ? to_float(f16{got[b]}) : to_float(bf16{got[b]});
        ASSERT_TRUE(std::isnan(g));
      } else {
        ASSERT_EQ(got[b], want) << dtype_name(from) << "->" << dtype_name(to) << std::hex << " bits 0x" << b;
      }
    }
  }
}

TEST(Cast, F32ToF32CopiesAndShapesNeedOnlyMatchInCount) {
  std::mt19937 rng(52);
  for (std::int64_t n : {0, 1, 17, 1000}) {
    Tensor src = random_tensor({n}, rng);
    Tensor dst = test::nan_tensor({1, n});
    cast(src, dst);
    EXPECT_EQ(dst.to_vector<float>(), src.to_vector<float>());
  }
}

TEST(Cast, Errors) {
  Tensor f = Tensor::zeros({4}, DType::kF32), i = Tensor::zeros({4}, DType::kI32), h5 = Tensor::zeros({5}, DType::kF16);
  EXPECT_TRUE(throws_error([&] { cast(f, i); }, ErrorKind::kDTypeMismatch, {"cast", "'dst'", "i32"}));
  EXPECT_TRUE(throws_error([&] { cast(i, f); }, ErrorKind::kDTypeMismatch, {"'src'"}));
  EXPECT_TRUE(throws_error([&] { cast(f, h5); }, ErrorKind::kShapeMismatch, {"'dst'", "4 elements", "[5]"}));
}

// scale_and_check_finite --------------------------------------------------------

TEST(ScaleAndCheckFinite, ScalesInPlaceForEveryDtype) {
  std::mt19937 rng(53);
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (std::int64_t n : {0, 1, 7, 1001}) {
      Tensor src = random_tensor({n}, rng, -100.f, 100.f);
      Tensor x = Tensor::empty({n}, dt);
      cast(src, x);
      const auto before = x.to_vector<float>();
      Tensor flag = Tensor::zeros({1}, DType::kF32);
      scale_and_check_finite(x, 0.125f / 3.f, flag);
      const auto after = x.to_vector<float>();
      for (std::size_t k = 0; k < after.size(); ++k) {
        const float v = before[k] * (0.125f / 3.f);
        const float want = dt == DType::kF32 ? v : dt == DType::kF16 ? to_float(to_f16(v)) : to_float(to_bf16(v));
        ASSERT_EQ(after[k], want) << dtype_name(dt);
      }
      EXPECT_EQ(flag.item(), 0.f) << dtype_name(dt);
    }
  }
}

TEST(ScaleAndCheckFinite, FlagIsSetByInfAndNanAndNeverReset) {
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor flag = Tensor::zeros({1}, DType::kF32);
    auto make = [&](std::vector<float> v) {
      Tensor t = Tensor::empty({std::int64_t(v.size())}, dt);
      cast(Tensor::from_vector(v, {std::int64_t(v.size())}), t);
      return t;
    };
    Tensor ok = make(std::vector<float>(300, 1.5f));
    scale_and_check_finite(ok, 2.f, flag);
    EXPECT_EQ(flag.item(), 0.f);
    std::vector<float> with_inf(300, 1.f);
    with_inf[257] = kInf;
    Tensor bad = make(with_inf);
    scale_and_check_finite(bad, 0.5f, flag);
    EXPECT_EQ(flag.item(), 1.f);
    scale_and_check_finite(ok, 1.f, flag);  // a finite tensor does not clear it
    EXPECT_EQ(flag.item(), 1.f);

    Tensor flag2 = Tensor::zeros({1}, DType::kF32);
    std::vector<float> with_nan(5, -2.f);
    with_nan[0] = NAN;
    Tensor n = make(with_nan);
    scale_and_check_finite(n, 1.f, flag2);
    EXPECT_EQ(flag2.item(), 1.f);
    // Multiplying by zero does not hide an Inf: inf * 0 = NaN.
    Tensor flag3 = Tensor::zeros({1}, DType::kF32);
    Tensor inf_again = make({kInf});
    scale_and_check_finite(inf_again, 0.f, flag3);
    EXPECT_EQ(flag3.item(), 1.f);
  }
}

TEST(ScaleAndCheckFinite, OverflowOfTheStoredValueSetsTheFlag) {
  // The result is what is stored: 60000 * 1.5 is finite in float but Inf in f16.
  Tensor flag = Tensor::zeros({1}, DType::kF32);
  Tensor h = Tensor::empty({3}, DType::kF16);
  h.fill_(60000.f);
  scale_and_check_finite(h, 1.5f, flag);
  EXPECT_TRUE(std::isinf(h.item(1)));
  EXPECT_EQ(flag.item(), 1.f);
  // Float overflow on f32 and bf16.
  for (DType dt : {DType::kF32, DType::kBF16}) {
    Tensor f = Tensor::empty({2}, dt), fl = Tensor::zeros({1}, DType::kF32);
    f.fill_(3e38f);
    scale_and_check_finite(f, 4.f, fl);
    EXPECT_EQ(fl.item(), 1.f) << dtype_name(dt);
  }
  // The largest finite f16 times 1 stays finite.
  Tensor edge = Tensor::empty({1}, DType::kF16), fe = Tensor::zeros({1}, DType::kF32);
  edge.fill_(65504.f);
  scale_and_check_finite(edge, 1.f, fe);
  EXPECT_EQ(fe.item(), 0.f);
}

TEST(ScaleAndCheckFinite, Errors) {
  Tensor x = Tensor::zeros({4}, DType::kF32), flag2 = Tensor::zeros({2}, DType::kF32);
  EXPECT_TRUE(throws_error([&] { scale_and_check_finite(x, 1.f, flag2); }, ErrorKind::kShapeMismatch,
                           {"'found_nonfinite'", "1 elements"}));
  Tensor flag16 = Tensor::zeros({1}, DType::kF16);
  EXPECT_TRUE(throws_error([&] { scale_and_check_finite(x, 1.f, flag16); }, ErrorKind::kDTypeMismatch,
                           {"'found_nonfinite'"}));
  Tensor xi = Tensor::zeros({4}, DType::kI32), flag = Tensor::zeros({1}, DType::kF32);
  EXPECT_TRUE(throws_error([&] { scale_and_check_finite(xi, 1.f, flag); }, ErrorKind::kDTypeMismatch, {"'x'"}));
}

// sum_squares ---------------------------------------------------------------------

TEST(SumSquares, MatchesDoubleReferenceAndAccumulates) {
  std::mt19937 rng(54);
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (std::int64_t n : {0, 1, 7, 16384, 16385, 100003}) {
      Tensor src = random_tensor({n}, rng, -3.f, 3.f);
      Tensor x = Tensor::empty({n}, dt);
      cast(src, x);
      double want = 2.5;
      for (float v : x.to_vector<float>()) want += double(v) * v;
      Tensor acc = Tensor::from_vector(std::vector<float>{2.5f}, {1});
      sum_squares(x, acc);
      // Summed in double: only the final rounding to f32 (plus the += 2.5) remains.
      EXPECT_NEAR(acc.item(), want, 2e-7 * want) << dtype_name(dt) << " n " << n;
    }
  }
  Tensor exact = Tensor::from_vector(std::vector<float>{1, -2, 3}, {3});
  Tensor acc = Tensor::zeros({1}, DType::kF32);
  sum_squares(exact, acc);
  sum_squares(exact, acc);
  EXPECT_EQ(acc.item(), 28.f);
}

#if defined(_OPENMP)
TEST(SumSquares, SameBitsWithOneAndTwoThreads) {
  std::mt19937 rng(55);
  for (DType dt : {DType::kF32, DType::kBF16}) {
    Tensor src = random_tensor({200003}, rng);
    Tensor x = Tensor::empty({200003}, dt);
    cast(src, x);
    std::vector<float> r;
    for (int threads : {1, 2}) {
      Tensor acc = Tensor::from_vector(std::vector<float>{0.1f}, {1});
      test::with_omp_threads(threads, [&] { sum_squares(x, acc); });
      r.push_back(acc.item());
    }
    EXPECT_EQ(std::memcmp(&r[0], &r[1], 4), 0) << dtype_name(dt);
  }
}
#endif

TEST(SumSquares, Errors) {
  Tensor x = Tensor::zeros({4}, DType::kF32), acc = Tensor::zeros({1}, DType::kBF16);
  EXPECT_TRUE(throws_error([&] { sum_squares(x, acc); }, ErrorKind::kDTypeMismatch, {"sum_squares", "'acc'"}));
  Tensor xi = Tensor::zeros({4}, DType::kI32), acc32 = Tensor::zeros({1}, DType::kF32);
  EXPECT_TRUE(throws_error([&] { sum_squares(xi, acc32); }, ErrorKind::kDTypeMismatch, {"'x'"}));
}

}  // namespace
}  // namespace ht::ops::cast_test
