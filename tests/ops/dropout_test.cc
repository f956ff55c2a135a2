// Dropout against a scalar reference of the hash its header documents (which
// pins the masks: a changed hash would change every run's masks), the same
// values whatever the split of rows into calls or the thread count, the kept
// fraction, p == 0, in-place calls, 16-bit dtypes and argument errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "half_util.h"
#include "ht/ops/dropout.h"
#include "test_util.h"

namespace ht::ops::dropout_test {
namespace {

using test::random_tensor;
using test::throws_error;

// The hash of ht/ops/dropout.h, written again from its description:
// splitmix64's finaliser absorbing seed, site, row and column in turn, each
// word w as h = finalize(h ^ (w + 0x9e3779b97f4a7c15)), from h = 0.
std::uint64_t finalize(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

bool ref_keep(const DropoutKey& key, std::int64_t row, std::int64_t col, float p) {
  std::uint64_t h = 0;
  for (std::uint64_t w : {key.seed, key.site, std::uint64_t(key.first_row + row), std::uint64_t(col)})
    h = finalize(h ^ (w + 0x9e3779b97f4a7c15ULL));
  const double u = double(h >> 40) / 16777216.0;  // [0, 1) on the 2^-24 grid
  return u >= double(p);
}

// out from the definition: x / (1 - p) as x * (1 / (1 - p)) in f32, or 0.
std::vector<float> dropout_ref(const Tensor& x, float p, const DropoutKey& key) {
  const auto v = x.to_vector<float>();
  const std::int64_t rows = x.size(0), len = rows ? x.numel() / rows : 0;
  const float scale = 1.f / (1.f - p);
  std::vector<float> out(v.size());
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t j = 0; j < len; ++j) {
      const std::size_t i = std::size_t(r * len + j);
      out[i] = ref_keep(key, r, j, p) ? v[i] * scale : 0.f;
    }
  return out;
}

::testing::AssertionResult same_bits(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << got.size() << " vs " << want.size();
  for (std::size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &want[i], 4) != 0)
      return ::testing::AssertionFailure() << "element " << i << ": got " << got[i] << ", want " << want[i];
  return ::testing::AssertionSuccess();
}

const DropoutKey kKey{0x1234abcdULL, 7, 0};

TEST(Dropout, MatchesScalarReference) {
  std::mt19937 rng(81);
  // 1-d (each element its own row), one element, primes, rows of one
  // element, 3-d rows, empty rows and an empty row count, rows longer than
  // the CPU's tasks (which then start inside rows).
  const Shape shapes[] = {{1}, {7}, {3, 5}, {13, 1}, {2, 3, 4}, {0, 4}, {4, 0}, {3, 20011}, {40000}};
  for (const Shape& s : shapes)
    for (float p : {0.1f, 0.5f, 0.9f})
      for (const DropoutKey& key : {kKey, DropoutKey{0, 0, 0}, DropoutKey{~0ULL, 1ULL << 63, 1000003}}) {
        SCOPED_TRACE(::testing::Message() << shape_str(s) << " p " << p << " seed " << key.seed);
        const Tensor x = random_tensor(s, rng, -3.f, 3.f);
        Tensor out = test::nan_tensor(s);
        dropout(x, p, key, out);
        ASSERT_TRUE(same_bits(out.to_vector<float>(), dropout_ref(x, p, key)));
      }
}

TEST(Dropout, SameValuesWhateverTheSplitOfRows) {
  std::mt19937 rng(82);
  const std::int64_t rows = 8, len = 37;
  const Tensor x = random_tensor({rows, 3, len}, rng);
  for (std::int64_t base : {0, 100}) {
    SCOPED_TRACE(::testing::Message() << "first_row " << base);
    const DropoutKey whole{42, 3, base};
    Tensor all = test::nan_tensor(x.shape());
    dropout(x, 0.3f, whole, all);
    const auto want = all.to_vector<float>();
    const std::size_t row_elems = std::size_t(3 * len);
    // Rows [4, 8) alone with first_row base + 4 are rows 4..7 of the whole call.
    for (std::int64_t split : {1, 3, 4, 7}) {
      for (auto [begin, end] : {std::pair<std::int64_t, std::int64_t>{0, split}, {split, rows}}) {
        const Tensor part = x.slice(begin, end);
        Tensor out = test::nan_tensor(part.shape());
        dropout(part, 0.3f, {whole.seed, whole.site, base + begin}, out);
        const std::vector<float> rows_of_all(want.begin() + std::ptrdiff_t(std::size_t(begin) * row_elems),
                                             want.begin() + std::ptrdiff_t(std::size_t(end) * row_elems));
        EXPECT_TRUE(same_bits(out.to_vector<float>(), rows_of_all)) << "rows [" << begin << ", " << end << ")";
      }
    }
  }
}

TEST(Dropout, KeptFractionAndScale) {
  // 2^20 ones: the kept fraction lies within 5 standard deviations
  // (sqrt(p (1 - p) / n) <= 5e-4) of 1 - p, and every kept value is exactly 1 / (1 - p).
  const std::int64_t n = 1 << 20;
  Tensor x = Tensor::empty({1024, 1024}, DType::kF32);
  x.fill_(1.f);
  for (float p : {0.05f, 0.1f, 0.5f, 0.9f}) {
    SCOPED_TRACE(::testing::Message() << "p " << p);
    Tensor out = Tensor::empty(x.shape(), DType::kF32);
    dropout(x, p, kKey, out);
    const float scale = 1.f / (1.f - p);
    std::int64_t kept = 0;
    for (float v : out.to_vector<float>()) {
      if (v != 0.f) {
        ASSERT_EQ(v, scale);
        ++kept;
      }
    }
    const double sigma = std::sqrt(double(p) * (1.0 - p) / double(n));
    EXPECT_NEAR(double(kept) / double(n), 1.0 - p, 5 * sigma);
    // The mean of out is the mean of x (1) within the same margin, scaled.
    EXPECT_NEAR(double(kept) * scale / double(n), 1.0, 5 * sigma * scale);
  }
}

TEST(Dropout, MasksDifferBetweenSeedsSitesRowsAndColumns) {
  // Independent decisions disagree on a fraction 2 p (1 - p) = 0.5 at p = 0.5.
  const std::int64_t rows = 64, len = 1024;
  Tensor x = Tensor::empty({rows, len}, DType::kF32);
  x.fill_(1.f);
  auto mask_of = [&](const DropoutKey& key) {
    Tensor out = Tensor::empty(x.shape(), DType::kF32);
    dropout(x, 0.5f, key, out);
    return out.to_vector<float>();
  };
  auto disagreement = [](const std::vector<float>& a, const std::vector<float>& b) {
    std::int64_t d = 0;
    for (std::size_t i = 0; i < a.size(); ++i) d += (a[i] == 0.f) != (b[i] == 0.f);
    return double(d) / double(a.size());
  };
  const auto base = mask_of(kKey);
  EXPECT_NEAR(disagreement(base, mask_of({kKey.seed + 1, kKey.site, 0})), 0.5, 0.01);
  EXPECT_NEAR(disagreement(base, mask_of({kKey.seed, kKey.site + 1, 0})), 0.5, 0.01);
  EXPECT_NEAR(disagreement(base, mask_of({kKey.seed, kKey.site, 1})), 0.5, 0.01);  // every row shifted by one
  // Column j against column j + 1 of the same rows.
  std::vector<float> shifted(base.size());
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t j = 0; j < len; ++j)
      shifted[std::size_t(r * len + j)] = base[std::size_t(r * len + (j + 1) % len)];
  EXPECT_NEAR(disagreement(base, shifted), 0.5, 0.01);
  // And the same key again gives the same mask.
  EXPECT_EQ(mask_of(kKey), base);
}

TEST(Dropout, ZeroPCopiesAndInPlace) {
  std::mt19937 rng(83);
  std::vector<float> v = test::random_floats(1000, rng);
  v[3] = -0.f;
  v[5] = INFINITY;
  const Tensor x = Tensor::from_vector(v, {10, 100});
  Tensor out = test::nan_tensor({10, 100});
  dropout(x, 0.f, kKey, out);
  EXPECT_TRUE(same_bits(out.to_vector<float>(), v));
  Tensor y = x.clone();
  dropout(y, 0.f, kKey, y);
  EXPECT_TRUE(same_bits(y.to_vector<float>(), v));
  // In place with p > 0: the same values as out of place.
  Tensor want = test::nan_tensor({10, 100});
  dropout(x, 0.25f, kKey, want);
  dropout(y, 0.25f, kKey, y);
  EXPECT_TRUE(same_bits(y.to_vector<float>(), want.to_vector<float>()));
}

TEST(Dropout, BackwardIsTheSameCallOnTheGradient) {
  // dL/dx of L = sum w * dropout(x) is dropout(w) with the same key: the
  // mask and scale of the forward, since the op is linear in x.
  std::mt19937 rng(84);
  const Tensor x = random_tensor({5, 41}, rng), w = random_tensor({5, 41}, rng);
  Tensor y = Tensor::empty(x.shape(), DType::kF32), dx = Tensor::empty(x.shape(), DType::kF32);
  dropout(x, 0.4f, kKey, y);
  dropout(w, 0.4f, kKey, dx);
  const auto vx = x.to_vector<float>(), vy = y.to_vector<float>(), vw = w.to_vector<float>(),
             vdx = dx.to_vector<float>();
  const float scale = 1.f / (1.f - 0.4f);
  for (std::size_t i = 0; i < vx.size(); ++i) {
    const bool kept = vy[i] != 0.f;  // x is never exactly 0 here
    ASSERT_EQ(vdx[i], kept ? vw[i] * scale : 0.f) << "element " << i;
    ASSERT_EQ(vy[i], kept ? vx[i] * scale : 0.f);
  }
}

#if defined(_OPENMP)
TEST(Dropout, SameBitsWithOneAndTwoThreads) {
  std::mt19937 rng(85);
  for (const Shape& s : {Shape{3, 100003}, Shape{70001}, Shape{513, 65}}) {
    const Tensor x = random_tensor(s, rng);
    std::vector<std::vector<float>> got;
    for (int threads : {1, 2}) {
      Tensor out = Tensor::empty(s, DType::kF32);
      test::with_omp_threads(threads, [&] { dropout(x, 0.3f, kKey, out); });
      got.push_back(out.to_vector<float>());
    }
    EXPECT_TRUE(same_bits(got[0], got[1])) << shape_str(s);
  }
}
#endif

TEST(Dropout, HalfMatchesF32OnTheSameValues) {
  std::mt19937 rng(86);
  for (DType dt : test::kHalfDtypes) {
    SCOPED_TRACE(dtype_name(dt));
    const auto x = test::random_half({9, 333}, dt, rng);
    Tensor o16 = test::nan_half({9, 333}, dt), o32 = test::nan_tensor({9, 333});
    dropout(x.half, 0.3f, kKey, o16);
    dropout(x.f32, 0.3f, kKey, o32);
    EXPECT_TRUE(test::rounded_once(o16, o32));
    Tensor copy = test::nan_half({9, 333}, dt);
    dropout(x.half, 0.f, kKey, copy);
    EXPECT_EQ(copy.to_vector<float>(), x.f32.to_vector<float>());
  }
}

TEST(Dropout, Errors) {
  auto t = [](Shape s, DType d = DType::kF32) { return Tensor::zeros(s, d); };
  Tensor out = t({2, 3});
  for (float p : {-0.1f, 1.f, 1.5f}) {
    SCOPED_TRACE(p);
    EXPECT_TRUE(throws_error([&] { dropout(t({2, 3}), p, kKey, out); }, ErrorKind::kInvalidArgument,
                             {"dropout", "p = ", "must be in [0, 1)"}));
  }
  EXPECT_TRUE(throws_error([&] { dropout(t({2, 3}), 1.f, kKey, out); }, ErrorKind::kInvalidArgument, {"p = 1 "}));
  EXPECT_TRUE(throws_error([&] { dropout(t({2, 3}), NAN, kKey, out); }, ErrorKind::kInvalidArgument,
                           {"p = nan", "[0, 1)"}));
  EXPECT_TRUE(throws_error([&] { dropout(t({2, 3}), 0.5f, {1, 2, -1}, out); }, ErrorKind::kInvalidArgument,
                           {"dropout", "first_row = -1", "must not be negative"}));
  Tensor scalar = t({});
  EXPECT_TRUE(throws_error([&] { dropout(t({}), 0.5f, kKey, scalar); }, ErrorKind::kShapeMismatch,
                           {"dropout", "0-d", "[1]"}));
  Tensor wrong = t({3, 2});
  EXPECT_TRUE(throws_error([&] { dropout(t({2, 3}), 0.5f, kKey, wrong); }, ErrorKind::kShapeMismatch,
                           {"dropout", "'out' must have shape [2, 3]", "got [3, 2]"}));
  Tensor out16 = t({2, 3}, DType::kBF16);
  EXPECT_TRUE(throws_error([&] { dropout(t({2, 3}), 0.5f, kKey, out16); }, ErrorKind::kDTypeMismatch,
                           {"dropout", "'out' is bf16", "'x' is f32"}));
  Tensor ids = t({2, 3}, DType::kI32);
  EXPECT_TRUE(throws_error([&] { dropout(t({2, 3}, DType::kI32), 0.5f, kKey, ids); }, ErrorKind::kDTypeMismatch,
                           {"'x' must be f32, f16 or bf16"}));
}

}  // namespace
}  // namespace ht::ops::dropout_test
