// index_select along any dimension, exactly, against a reference; the
// scatter-add backward against finite differences, with repeated indices in
// a fixed order; empty index lists, determinism across thread counts,
// 16-bit dtypes, out-of-range indices and argument errors.
#include "ht/ops/index_select.h"

#include <gtest/gtest.h>

#include <cstring>

#include "half_util.h"
#include "test_util.h"

namespace ht::ops::index_select_test {
namespace {

using test::all_close;
using test::finite_diff_grad;
using test::random_tensor;
using test::throws_error;

Tensor index_of(const std::vector<std::int32_t>& v) { return Tensor::from_vector(v, {std::int64_t(v.size())}); }

Shape with_size(Shape s, int dim, std::int64_t k) {
  s[std::size_t(dim)] = k;
  return s;
}

struct View {
  std::int64_t outer, size, inner;
};
View view_of(const Shape& s, int dim) {
  View v{1, s[std::size_t(dim)], 1};
  for (int d = 0; d < dim; ++d) v.outer *= s[std::size_t(d)];
  for (std::size_t d = std::size_t(dim) + 1; d < s.size(); ++d) v.inner *= s[d];
  return v;
}

struct Case {
  Shape shape;
  int dim;
  std::vector<std::int32_t> index;
};
// Leading, middle and last dimensions; repeated indices; K = 0 and 1; the
// first-token example; inner extents past the CPU's 256-column tasks.
const Case kCases[] = {{{4, 3}, 0, {3, 0, 3}},         {{2, 5, 3}, 1, {0}},           {{2, 5, 3}, 1, {4, 1, 1, 4, 2}},
                       {{2, 5, 3}, -1, {2, 2, 0}},     {{3, 7}, 1, {}},               {{1, 1}, 1, {0}},
                       {{2, 6, 300}, 1, {5, 5, 0, 5}}, {{700, 2}, 0, {1, 699, 1}},    {{2, 3, 4, 5}, 2, {3, 0, 3, 3}}};

TEST(IndexSelect, ForwardIsExact) {
  std::mt19937 rng(101);
  for (const Case& c : kCases) {
    const int dim = c.dim < 0 ? c.dim + int(c.shape.size()) : c.dim;
    SCOPED_TRACE(::testing::Message() << shape_str(c.shape) << " dim " << c.dim << " K " << c.index.size());
    const std::int64_t k = std::int64_t(c.index.size());
    Tensor x = random_tensor(c.shape, rng), out = test::nan_tensor(with_size(c.shape, dim, k));
    index_select(x, c.dim, index_of(c.index), out);
    const View v = view_of(c.shape, dim);
    const auto vx = x.to_vector<float>(), vo = out.to_vector<float>();
    for (std::int64_t o = 0; o < v.outer; ++o)
      for (std::int64_t i = 0; i < k; ++i)
        for (std::int64_t j = 0; j < v.inner; ++j)
          ASSERT_EQ(vo[std::size_t((o * k + i) * v.inner + j)],
                    vx[std::size_t((o * v.size + c.index[std::size_t(i)]) * v.inner + j)]);
  }
}

TEST(IndexSelect, FirstTokenOfEachSequence) {
  std::vector<float> v(2 * 4 * 3);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = float(i);
  Tensor out = test::nan_tensor({2, 1, 3});
  index_select(Tensor::from_vector(v, {2, 4, 3}), 1, index_of({0}), out);
  EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{0, 1, 2, 12, 13, 14}));
}

TEST(IndexSelect, BackwardScatterAddsInIndexOrder) {
  std::mt19937 rng(102);
  for (const Case& c : kCases) {
    const int dim = c.dim < 0 ? c.dim + int(c.shape.size()) : c.dim;
    SCOPED_TRACE(::testing::Message() << shape_str(c.shape) << " dim " << c.dim << " K " << c.index.size());
    const std::int64_t k = std::int64_t(c.index.size());
    const Tensor w = random_tensor(with_size(c.shape, dim, k), rng);  // L = sum w * out
    Tensor dx = test::nan_tensor(c.shape);  // overwritten
    index_select_backward(w, c.dim, index_of(c.index), dx);
    // The reference adds in index order in f32, as the op promises: the same bits.
    const View v = view_of(c.shape, dim);
    std::vector<float> want(std::size_t(shape_numel(c.shape)), 0.f);
    const auto vw = w.to_vector<float>();
    for (std::int64_t o = 0; o < v.outer; ++o)
      for (std::int64_t i = 0; i < k; ++i)
        for (std::int64_t j = 0; j < v.inner; ++j)
          want[std::size_t((o * v.size + c.index[std::size_t(i)]) * v.inner + j)] += vw[std::size_t((o * k + i) * v.inner + j)];
    EXPECT_EQ(dx.to_vector<float>(), want);
    if (shape_numel(c.shape) <= 200) {
      const auto vwd = test::to_double(w);
      const auto fd = finite_diff_grad(
          [&](const std::vector<double>& x) {
            double l = 0;
            for (std::int64_t o = 0; o < v.outer; ++o)
              for (std::int64_t i = 0; i < k; ++i)
                for (std::int64_t j = 0; j < v.inner; ++j)
                  l += vwd[std::size_t((o * k + i) * v.inner + j)] *
                       x[std::size_t((o * v.size + c.index[std::size_t(i)]) * v.inner + j)];
            return l;
          },
          std::vector<double>(std::size_t(shape_numel(c.shape)), 0.25));
      EXPECT_TRUE(all_close(dx.to_vector<float>(), fd, 1e-6, 1e-9));
    }
  }
}

#if defined(_OPENMP)
TEST(IndexSelect, BackwardSameBitsWithOneAndTwoThreads) {
  std::mt19937 rng(103);
  std::vector<std::int32_t> idx(3000);
  std::uniform_int_distribution<std::int32_t> pick(0, 4);  // every index repeats ~600 times
  for (auto& i : idx) i = pick(rng);
  const Tensor index = index_of(idx), w = random_tensor({3, 3000, 70}, rng);
  std::vector<std::vector<float>> got;
  for (int threads : {1, 2}) {
    Tensor dx = Tensor::empty({3, 5, 70}, DType::kF32);
    test::with_omp_threads(threads, [&] { index_select_backward(w, 1, index, dx); });
    got.push_back(dx.to_vector<float>());
  }
  EXPECT_EQ(std::memcmp(got[0].data(), got[1].data(), got[0].size() * 4), 0);
}
#endif

TEST(IndexSelect, HalfIsExactToo) {
  std::mt19937 rng(104);
  for (DType dt : test::kHalfDtypes) {
    SCOPED_TRACE(dtype_name(dt));
    const auto x = test::random_half({3, 6, 5}, dt, rng);
    const Tensor index = index_of({5, 0, 5});
    Tensor o16 = test::nan_half({3, 3, 5}, dt), o32 = test::nan_tensor({3, 3, 5});
    index_select(x.half, 1, index, o16);
    index_select(x.f32, 1, index, o32);
    EXPECT_EQ(o16.to_vector<float>(), o32.to_vector<float>());
    const auto g = test::random_half({3, 3, 5}, dt, rng);
    Tensor d16 = test::nan_half({3, 6, 5}, dt), d32 = test::nan_tensor({3, 6, 5});
    index_select_backward(g.half, 1, index, d16);
    index_select_backward(g.f32, 1, index, d32);
    EXPECT_TRUE(test::rounded_once(d16, d32));
  }
}

TEST(IndexSelect, OutOfRangeIndicesNameTheIndexAndTheBound) {
  Tensor out = Tensor::zeros({2, 3, 4}, DType::kF32);
  const Tensor x = Tensor::zeros({2, 5, 4}, DType::kF32);
  EXPECT_TRUE(throws_error([&] { index_select(x, 1, index_of({0, 5, -1}), out); }, ErrorKind::kOutOfRange,
                           {"index_select", "index 5 at position 1", "outside [0, 5)", "dimension 1 of 'x' [2, 5, 4]"}));
  EXPECT_TRUE(throws_error([&] { index_select(x, 1, index_of({-2, 0, 0}), out); }, ErrorKind::kOutOfRange,
                           {"index -2 at position 0"}));
  Tensor dx = Tensor::zeros({2, 5, 4}, DType::kF32);
  EXPECT_TRUE(throws_error([&] { index_select_backward(out, -2, index_of({4, 4, 7}), dx); }, ErrorKind::kOutOfRange,
                           {"index_select_backward", "index 7 at position 2", "dimension 1 of 'dx'"}));
  // Nothing was written before the throw.
  for (float v : dx.to_vector<float>()) EXPECT_EQ(v, 0.f);
}

TEST(IndexSelect, Errors) {
  auto t = [](Shape s, DType d = DType::kF32) { return Tensor::zeros(s, d); };
  Tensor out = t({2, 2, 4});
  EXPECT_TRUE(throws_error([&] { index_select(t({2, 5, 4}), 3, index_of({0, 1}), out); }, ErrorKind::kInvalidArgument,
                           {"index_select", "dim 3 is out of range", "[-3, 3)"}));
  EXPECT_TRUE(throws_error([&] { index_select(t({2, 5, 4}), 2, index_of({0, 1}), out); }, ErrorKind::kShapeMismatch,
                           {"'out' must have shape [2, 5, 2]", "got [2, 2, 4]"}));
  const Tensor idx_f = t({2}), idx_2d = Tensor::from_vector(std::vector<std::int32_t>{0, 1}, {1, 2});
  EXPECT_TRUE(throws_error([&] { index_select(t({2, 5, 4}), 1, idx_f, out); }, ErrorKind::kDTypeMismatch,
                           {"'index' must be i32"}));
  EXPECT_TRUE(throws_error([&] { index_select(t({2, 5, 4}), 1, idx_2d, out); }, ErrorKind::kShapeMismatch,
                           {"'index' must be 1-d"}));
  EXPECT_TRUE(throws_error([&] { index_select(t({2, 5, 4}, DType::kBF16), 1, index_of({0, 1}), out); },
                           ErrorKind::kDTypeMismatch, {"'out' is f32", "'x' is bf16"}));
  Tensor dx = t({2, 5, 4});
  EXPECT_TRUE(throws_error([&] { index_select_backward(t({2, 3, 4}), 1, index_of({0, 1}), dx); },
                           ErrorKind::kShapeMismatch, {"index_select_backward", "'dout' must have shape [2, 2, 4]"}));
}

}  // namespace
}  // namespace ht::ops::index_select_test
