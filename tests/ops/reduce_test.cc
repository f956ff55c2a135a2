// Sum and mean along any dimension against a double-precision reference;
// backward (a broadcast) analytically and by finite differences; negative
// dims, empty dimensions, determinism across thread counts, 16-bit dtypes
// and argument errors.
#include "ht/ops/reduce.h"

#include <gtest/gtest.h>

#include <cstring>

#include "half_util.h"
#include "test_util.h"

namespace ht::ops::reduce_test {
namespace {

using test::all_close;
using test::finite_diff_grad;
using test::random_tensor;
using test::throws_error;

Shape without(Shape s, int dim) {
  s.erase(s.begin() + dim);
  return s;
}

// out[o, i] = sum (or mean) over k of x[o, k, i], from the definition.
std::vector<double> reduce_ref(const std::vector<double>& x, const Shape& shape, int dim, bool mean) {
  std::int64_t outer = 1, inner = 1;
  for (int d = 0; d < dim; ++d) outer *= shape[std::size_t(d)];
  for (std::size_t d = std::size_t(dim) + 1; d < shape.size(); ++d) inner *= shape[d];
  const std::int64_t size = shape[std::size_t(dim)];
  std::vector<double> out(std::size_t(outer * inner), 0.0);
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t k = 0; k < size; ++k)
      for (std::int64_t i = 0; i < inner; ++i) out[std::size_t(o * inner + i)] += x[std::size_t((o * size + k) * inner + i)];
  if (mean)
    for (double& v : out) v /= double(size);
  return out;
}

struct Case {
  Shape shape;
  int dim;
};
// Every position of the reduced dimension (first, middle, last), sizes 1 and
// primes, an inner extent past the CPU's 256-column tasks, long rows.
const Case kCases[] = {{{1}, 0},       {{7}, 0},           {{5, 3}, 0},         {{5, 3}, 1},        {{2, 1, 3}, 1},
                       {{3, 13, 5}, 1}, {{3, 13, 5}, -1},  {{3, 13, 5}, 0},     {{2, 3, 300}, 1},   {{4, 70001}, 1},
                       {{2, 5, 7, 3}, 2}, {{2, 5, 7, 3}, -4}};

TEST(Reduce, SumAndMeanMatchDoubleReference) {
  std::mt19937 rng(91);
  for (const Case& c : kCases)
    for (Reduction r : {Reduction::kSum, Reduction::kMean}) {
      SCOPED_TRACE(::testing::Message() << shape_str(c.shape) << " dim " << c.dim << " mean " << (r == Reduction::kMean));
      const int dim = c.dim < 0 ? c.dim + int(c.shape.size()) : c.dim;
      Tensor x = random_tensor(c.shape, rng, -2.f, 2.f), out = test::nan_tensor(without(c.shape, dim));
      reduce(x, c.dim, r, out);
      EXPECT_TRUE(all_close(out.to_vector<float>(), reduce_ref(test::to_double(x), c.shape, dim, r == Reduction::kMean),
                            1e-7));
    }
}

TEST(Reduce, MeanPoolingOverTheSequence) {
  // (B, T, C) over T -> (B, C): the example of the header, with exact values.
  std::vector<float> v(2 * 4 * 3);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = float(i);
  Tensor x = Tensor::from_vector(v, {2, 4, 3}), out = test::nan_tensor({2, 3});
  reduce(x, 1, Reduction::kMean, out);
  EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{4.5f, 5.5f, 6.5f, 16.5f, 17.5f, 18.5f}));
  // A 1-d x reduces to a 0-d tensor of one element.
  Tensor total = Tensor::empty({}, DType::kF32);
  reduce(Tensor::from_vector(std::vector<float>{1, 2, 3.5f}, {3}), 0, Reduction::kSum, total);
  EXPECT_EQ(total.numel(), 1);
  EXPECT_EQ(total.item(0), 6.5f);
}

TEST(Reduce, EmptyDimensions) {
  // A sum over nothing is zero; empty outer or inner extents write nothing.
  Tensor x = Tensor::zeros({3, 0, 2}, DType::kF32), out = test::nan_tensor({3, 2});
  reduce(x, 1, Reduction::kSum, out);
  EXPECT_EQ(out.to_vector<float>(), std::vector<float>(6, 0.f));
  Tensor none = Tensor::zeros({0, 4}, DType::kF32), out0 = Tensor::zeros({0}, DType::kF32);
  EXPECT_NO_THROW(reduce(none, 1, Reduction::kMean, out0));
  EXPECT_TRUE(throws_error([&] { reduce(x, 1, Reduction::kMean, out); }, ErrorKind::kInvalidArgument,
                           {"reduce", "mean over dimension 1", "[3, 0, 2]", "no elements"}));
}

TEST(Reduce, BackwardBroadcastsAndMatchesFiniteDifferences) {
  std::mt19937 rng(92);
  for (const Case& c : kCases) {
    const std::int64_t n = shape_numel(c.shape);
    for (Reduction r : {Reduction::kSum, Reduction::kMean}) {
      SCOPED_TRACE(::testing::Message() << shape_str(c.shape) << " dim " << c.dim << " mean " << (r == Reduction::kMean));
      const int dim = c.dim < 0 ? c.dim + int(c.shape.size()) : c.dim;
      const bool mean = r == Reduction::kMean;
      const Shape small = without(c.shape, dim);
      Tensor w = random_tensor(small, rng), dx = test::nan_tensor(c.shape);  // L = sum w * out
      reduce_backward(w, c.dim, c.shape[std::size_t(dim)], r, dx);
      if (n <= 300) {
        const auto vw = test::to_double(w);
        const auto want = finite_diff_grad(
            [&](const std::vector<double>& x) {
              const auto o = reduce_ref(x, c.shape, dim, mean);
              double l = 0;
              for (std::size_t i = 0; i < o.size(); ++i) l += vw[i] * o[i];
              return l;
            },
            std::vector<double>(std::size_t(n), 0.5));
        EXPECT_TRUE(all_close(dx.to_vector<float>(), want, 1e-6, 1e-9));
      }
      // Exactly dout (or dout / size) at every position of the dimension.
      const auto vdx = dx.to_vector<float>(), vw = w.to_vector<float>();
      const std::int64_t size = c.shape[std::size_t(dim)];
      std::int64_t inner = 1;
      for (std::size_t d = std::size_t(dim) + 1; d < c.shape.size(); ++d) inner *= c.shape[d];
      for (std::int64_t e = 0; e < n; ++e) {
        const std::int64_t o = e / (size * inner), i = e % inner;
        const float g = vw[std::size_t(o * inner + i)];
        ASSERT_EQ(vdx[std::size_t(e)], mean ? g / float(size) : g) << "element " << e;
      }
    }
  }
}

#if defined(_OPENMP)
TEST(Reduce, SameBitsWithOneAndTwoThreads) {
  std::mt19937 rng(93);
  for (const Case& c : {Case{{5, 100003}, 1}, Case{{3, 1000, 700}, 1}, Case{{6000, 33}, 0}}) {
    Tensor x = random_tensor(c.shape, rng);
    std::vector<std::vector<float>> got;
    for (int threads : {1, 2}) {
      Tensor out = Tensor::empty(without(c.shape, c.dim), DType::kF32);
      test::with_omp_threads(threads, [&] { reduce(x, c.dim, Reduction::kSum, out); });
      got.push_back(out.to_vector<float>());
    }
    EXPECT_EQ(std::memcmp(got[0].data(), got[1].data(), got[0].size() * 4), 0) << shape_str(c.shape);
  }
}
#endif

TEST(Reduce, HalfMatchesF32OnTheSameValues) {
  std::mt19937 rng(94);
  for (DType dt : test::kHalfDtypes) {
    SCOPED_TRACE(dtype_name(dt));
    const auto x = test::random_half({4, 9, 33}, dt, rng);
    Tensor o16 = test::nan_half({4, 33}, dt), o32 = test::nan_tensor({4, 33});
    reduce(x.half, 1, Reduction::kMean, o16);
    reduce(x.f32, 1, Reduction::kMean, o32);
    EXPECT_TRUE(test::rounded_once(o16, o32));
    const auto g = test::random_half({4, 33}, dt, rng);
    Tensor d16 = test::nan_half({4, 9, 33}, dt), d32 = test::nan_tensor({4, 9, 33});
    reduce_backward(g.half, 1, 9, Reduction::kMean, d16);
    reduce_backward(g.f32, 1, 9, Reduction::kMean, d32);
    EXPECT_TRUE(test::rounded_once(d16, d32));
  }
}

TEST(Reduce, Errors) {
  auto t = [](Shape s, DType d = DType::kF32) { return Tensor::zeros(s, d); };
  Tensor out = t({2, 4});
  EXPECT_TRUE(throws_error([&] { reduce(t({2, 3, 4}), 3, Reduction::kSum, out); }, ErrorKind::kInvalidArgument,
                           {"reduce", "dim 3 is out of range", "[2, 3, 4]", "[-3, 3)"}));
  EXPECT_TRUE(throws_error([&] { reduce(t({2, 3, 4}), -4, Reduction::kSum, out); }, ErrorKind::kInvalidArgument,
                           {"dim -4"}));
  EXPECT_TRUE(throws_error([&] { reduce(t({2, 3, 4}), 2, Reduction::kSum, out); }, ErrorKind::kShapeMismatch,
                           {"'out' must have shape [2, 3]", "without dimension 2", "got [2, 4]"}));
  Tensor scalar = t({});
  EXPECT_TRUE(throws_error([&] { reduce(t({}), 0, Reduction::kSum, scalar); }, ErrorKind::kShapeMismatch,
                           {"no dimension"}));
  Tensor out16 = t({2, 4}, DType::kF16);
  EXPECT_TRUE(throws_error([&] { reduce(t({2, 3, 4}), 1, Reduction::kSum, out16); }, ErrorKind::kDTypeMismatch,
                           {"'out' is f16", "'x' is f32"}));
  Tensor dx = t({2, 3, 4});
  EXPECT_TRUE(throws_error([&] { reduce_backward(t({2, 4}), 1, 5, Reduction::kMean, dx); }, ErrorKind::kShapeMismatch,
                           {"reduce_backward", "'dx' must have shape [2, 5, 4]", "mean", "got [2, 3, 4]"}));
  EXPECT_TRUE(throws_error([&] { reduce_backward(t({2, 4}), 3, 3, Reduction::kSum, dx); }, ErrorKind::kInvalidArgument,
                           {"dim 3 is out of range"}));
  EXPECT_TRUE(throws_error([&] { reduce_backward(t({2, 4}), 1, -1, Reduction::kSum, dx); },
                           ErrorKind::kInvalidArgument, {"size -1"}));
}

}  // namespace
}  // namespace ht::ops::reduce_test
