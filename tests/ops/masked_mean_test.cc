// Masked mean pooling and its backward against scalar references and finite
// differences: rows with nothing kept, any nonzero mask value keeping, empty
// dimensions, agreement with reduce's mean when nothing is masked,
// thread-count independence, 16-bit dtypes and argument errors.
#include <gtest/gtest.h>

#include <cstring>

#include "half_util.h"
#include "ht/ops/reduce.h"
#include "test_util.h"

namespace ht::ops::masked_mean_test {
namespace {

using test::all_close;
using test::random_tensor;
using test::throws_error;

struct Dims {
  std::int64_t b, t, c;
};
// Empty batch, sequence and channels; one of each; C = 1; primes; a width
// past the CPU's 256-column tasks.
const Dims kDims[] = {{0, 3, 2}, {1, 1, 1}, {2, 5, 3}, {3, 7, 1}, {4, 13, 300}, {2, 0, 4}, {3, 4, 0}, {5, 31, 17}};

// A mask (b, t): random 0/1 with other nonzero values (which keep too), and
// batch row 1 (when there is one) all masked.
Tensor make_mask(const Dims& d, std::mt19937& rng) {
  std::uniform_int_distribution<int> pick(0, 3);
  const std::int32_t values[] = {0, 1, 7, -2};
  std::vector<std::int32_t> m(std::size_t(d.b * d.t));
  for (auto& v : m) v = values[pick(rng)];
  if (d.b > 1)
    for (std::int64_t i = 0; i < d.t; ++i) m[std::size_t(d.t + i)] = 0;
  return Tensor::from_vector(m, {d.b, d.t});
}

std::vector<std::int64_t> counts_of(const std::vector<std::int32_t>& m, const Dims& d) {
  std::vector<std::int64_t> n(std::size_t(d.b), 0);
  for (std::int64_t b = 0; b < d.b; ++b)
    for (std::int64_t t = 0; t < d.t; ++t) n[std::size_t(b)] += m[std::size_t(b * d.t + t)] != 0;
  return n;
}

// out (b, c) from the definition, in double.
std::vector<double> masked_mean_ref(const std::vector<double>& x, const std::vector<std::int32_t>& m, const Dims& d) {
  const auto n = counts_of(m, d);
  std::vector<double> out(std::size_t(d.b * d.c), 0.0);
  for (std::int64_t b = 0; b < d.b; ++b)
    for (std::int64_t t = 0; t < d.t; ++t)
      if (m[std::size_t(b * d.t + t)] != 0)
        for (std::int64_t c = 0; c < d.c; ++c) out[std::size_t(b * d.c + c)] += x[std::size_t((b * d.t + t) * d.c + c)];
  for (std::int64_t b = 0; b < d.b; ++b)
    for (std::int64_t c = 0; c < d.c; ++c)
      if (n[std::size_t(b)] > 0) out[std::size_t(b * d.c + c)] /= double(n[std::size_t(b)]);
  return out;
}

TEST(MaskedMean, MatchesScalarReference) {
  std::mt19937 rng(71);
  for (const Dims& d : kDims) {
    SCOPED_TRACE(::testing::Message() << d.b << "x" << d.t << "x" << d.c);
    const Tensor x = random_tensor({d.b, d.t, d.c}, rng, -2.f, 2.f), mask = make_mask(d, rng);
    Tensor out = test::nan_tensor({d.b, d.c});
    masked_mean(x, mask, out);
    const auto vm = mask.to_vector<std::int32_t>();
    const auto want = masked_mean_ref(test::to_double(x), vm, d);
    EXPECT_TRUE(all_close(out.to_vector<float>(), want, 1e-7));
    // The all-masked row (row 1) is exactly 0.
    if (d.b > 1)
      for (std::int64_t c = 0; c < d.c; ++c) EXPECT_EQ(out.item(d.c + c), 0.f);
  }
}

TEST(MaskedMean, KnownValues) {
  // x (2, 3, 2) = 0..11; row 0 keeps t = 0 and 2, row 1 keeps only t = 1 (value 5).
  std::vector<float> v(12);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = float(i);
  const Tensor x = Tensor::from_vector(v, {2, 3, 2});
  const Tensor mask = Tensor::from_vector(std::vector<std::int32_t>{1, 0, 1, 0, 5, 0}, {2, 3});
  Tensor out = test::nan_tensor({2, 2});
  masked_mean(x, mask, out);
  EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{2, 3, 8, 9}));  // (0+4)/2, (1+5)/2; 8, 9
  Tensor dx = test::nan_tensor({2, 3, 2});
  masked_mean_backward(Tensor::from_vector(std::vector<float>{2, 4, 6, 8}, {2, 2}), mask, dx);
  EXPECT_EQ(dx.to_vector<float>(), (std::vector<float>{1, 2, 0, 0, 1, 2, 0, 0, 6, 8, 0, 0}));
}

TEST(MaskedMean, EqualsReduceMeanWhenNothingIsMasked) {
  // Same order (t increasing, in double) and the same final division: the
  // same bits as reduce's mean over dimension 1 (C > 1: its column path).
  std::mt19937 rng(72);
  const Dims d{3, 29, 40};
  const Tensor x = random_tensor({d.b, d.t, d.c}, rng);
  const Tensor ones = Tensor::from_vector(std::vector<std::int32_t>(std::size_t(d.b * d.t), 1), {d.b, d.t});
  Tensor got = test::nan_tensor({d.b, d.c}), want = test::nan_tensor({d.b, d.c});
  masked_mean(x, ones, got);
  reduce(x, 1, Reduction::kMean, want);
  EXPECT_EQ(got.to_vector<float>(), want.to_vector<float>());
  Tensor dx = test::nan_tensor({d.b, d.t, d.c}), dx_ref = test::nan_tensor({d.b, d.t, d.c});
  masked_mean_backward(want, ones, dx);
  reduce_backward(want, 1, d.t, Reduction::kMean, dx_ref);
  EXPECT_EQ(dx.to_vector<float>(), dx_ref.to_vector<float>());
}

TEST(MaskedMeanBackward, ExactAndMatchesFiniteDifferences) {
  std::mt19937 rng(73);
  for (const Dims& d : kDims) {
    SCOPED_TRACE(::testing::Message() << d.b << "x" << d.t << "x" << d.c);
    const Tensor dout = random_tensor({d.b, d.c}, rng), mask = make_mask(d, rng);
    Tensor dx = test::nan_tensor({d.b, d.t, d.c});
    masked_mean_backward(dout, mask, dx);
    const auto vm = mask.to_vector<std::int32_t>();
    const auto n = counts_of(vm, d);
    const auto vg = dout.to_vector<float>(), vdx = dx.to_vector<float>();
    for (std::int64_t b = 0; b < d.b; ++b)
      for (std::int64_t t = 0; t < d.t; ++t)
        for (std::int64_t c = 0; c < d.c; ++c) {
          const bool keep = vm[std::size_t(b * d.t + t)] != 0;
          const float want = keep ? vg[std::size_t(b * d.c + c)] / float(n[std::size_t(b)]) : 0.f;
          ASSERT_EQ(vdx[std::size_t((b * d.t + t) * d.c + c)], want) << b << ", " << t << ", " << c;
        }
    const std::int64_t numel = d.b * d.t * d.c;
    if (numel == 0 || numel > 400) continue;
    const auto w = test::to_double(dout);
    const auto want = test::finite_diff_grad(
        [&](const std::vector<double>& x) {
          const auto o = masked_mean_ref(x, vm, d);
          double l = 0;
          for (std::size_t i = 0; i < o.size(); ++i) l += w[i] * o[i];
          return l;
        },
        test::to_double(random_tensor({d.b, d.t, d.c}, rng)));
    EXPECT_TRUE(all_close(vdx, want, 1e-6, 1e-9));
  }
}

#if defined(_OPENMP)
TEST(MaskedMean, SameBitsWithOneAndTwoThreads) {
  std::mt19937 rng(74);
  for (const Dims& d : {Dims{8, 500, 300}, Dims{1, 3000, 700}, Dims{2000, 40, 1}}) {
    const Tensor x = random_tensor({d.b, d.t, d.c}, rng), mask = make_mask(d, rng);
    const Tensor dout = random_tensor({d.b, d.c}, rng);
    std::vector<std::vector<float>> got, grads;
    for (int threads : {1, 2}) {
      Tensor out = Tensor::empty({d.b, d.c}, DType::kF32), dx = Tensor::empty({d.b, d.t, d.c}, DType::kF32);
      test::with_omp_threads(threads, [&] {
        masked_mean(x, mask, out);
        masked_mean_backward(dout, mask, dx);
      });
      got.push_back(out.to_vector<float>());
      grads.push_back(dx.to_vector<float>());
    }
    EXPECT_EQ(std::memcmp(got[0].data(), got[1].data(), got[0].size() * 4), 0);
    EXPECT_EQ(std::memcmp(grads[0].data(), grads[1].data(), grads[0].size() * 4), 0);
  }
}
#endif

TEST(MaskedMean, HalfMatchesF32OnTheSameValues) {
  std::mt19937 rng(75);
  const Dims d{4, 9, 33};
  for (DType dt : test::kHalfDtypes) {
    SCOPED_TRACE(dtype_name(dt));
    const auto x = test::random_half({d.b, d.t, d.c}, dt, rng);
    const Tensor mask = make_mask(d, rng);
    Tensor o16 = test::nan_half({d.b, d.c}, dt), o32 = test::nan_tensor({d.b, d.c});
    masked_mean(x.half, mask, o16);
    masked_mean(x.f32, mask, o32);
    EXPECT_TRUE(test::rounded_once(o16, o32));
    const auto g = test::random_half({d.b, d.c}, dt, rng);
    Tensor d16 = test::nan_half({d.b, d.t, d.c}, dt), d32 = test::nan_tensor({d.b, d.t, d.c});
    masked_mean_backward(g.half, mask, d16);
    masked_mean_backward(g.f32, mask, d32);
    EXPECT_TRUE(test::rounded_once(d16, d32));
  }
}

TEST(MaskedMean, Errors) {
  auto t = [](Shape s, DType d = DType::kF32) { return Tensor::zeros(s, d); };
  const Tensor mask = t({2, 3}, DType::kI32);
  Tensor out = t({2, 4});
  EXPECT_TRUE(throws_error([&] { masked_mean(t({2, 3, 4}), t({2, 3}), out); }, ErrorKind::kDTypeMismatch,
                           {"masked_mean", "'mask' must be i32", "got f32"}));
  EXPECT_TRUE(throws_error([&] { masked_mean(t({6, 4}), mask, out); }, ErrorKind::kShapeMismatch,
                           {"masked_mean", "'x' must be 3-d (B, T, C)", "[6, 4]"}));
  EXPECT_TRUE(throws_error([&] { masked_mean(t({2, 5, 4}), mask, out); }, ErrorKind::kShapeMismatch,
                           {"masked_mean", "'mask' must have shape [2, 5]", "got [2, 3]"}));
  Tensor out_bad = t({2, 3});
  EXPECT_TRUE(throws_error([&] { masked_mean(t({2, 3, 4}), mask, out_bad); }, ErrorKind::kShapeMismatch,
                           {"masked_mean", "'out' must have shape [2, 4]", "got [2, 3]"}));
  Tensor out16 = t({2, 4}, DType::kF16);
  EXPECT_TRUE(throws_error([&] { masked_mean(t({2, 3, 4}), mask, out16); }, ErrorKind::kDTypeMismatch,
                           {"masked_mean", "'out' is f16", "'x' is f32"}));
  Tensor dx = t({2, 3, 4});
  EXPECT_TRUE(throws_error([&] { masked_mean_backward(t({2, 4}), t({2, 3}, DType::kBF16), dx); },
                           ErrorKind::kDTypeMismatch, {"masked_mean_backward", "'mask' must be i32", "bf16"}));
  EXPECT_TRUE(throws_error([&] { masked_mean_backward(t({2, 3, 4}), mask, dx); }, ErrorKind::kShapeMismatch,
                           {"masked_mean_backward", "'dout' must be 2-d (B, C)"}));
  EXPECT_TRUE(throws_error([&] { masked_mean_backward(t({3, 4}), mask, dx); }, ErrorKind::kShapeMismatch,
                           {"masked_mean_backward", "'mask' must be 2-d (B, T) with B = 3", "got [2, 3]"}));
  Tensor dx_bad = t({2, 4, 4});
  EXPECT_TRUE(throws_error([&] { masked_mean_backward(t({2, 4}), mask, dx_bad); }, ErrorKind::kShapeMismatch,
                           {"masked_mean_backward", "'dx' must have shape [2, 3, 4]", "got [2, 4, 4]"}));
  Tensor undefined;
  EXPECT_TRUE(throws_error([&] { masked_mean(t({2, 3, 4}), undefined, out); }, ErrorKind::kInvalidArgument,
                           {"masked_mean", "'mask' is undefined"}));
}

}  // namespace
}  // namespace ht::ops::masked_mean_test
