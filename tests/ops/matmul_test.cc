// ops::matmul against a double-precision loop, for every transpose
// combination, alpha/beta, 2-D and batched 3-D, awkward sizes, and both host
// GEMM backends; plus its argument errors.
#include "ht/ops/matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <tuple>

#include "half_util.h"
#include "test_util.h"

namespace ht::ops::matmul_test {
namespace {

using test::random_tensor;
using test::throws_error;

// The reference and a per-element error bound: an f32 dot product of length K
// is within about K * 2^-24 * sum_k |a_ik b_kj| of the exact value (gamma_K),
// scaled by alpha, plus the rounding of beta * c.
struct Reference {
  std::vector<double> value, bound;
};

Reference reference(const std::vector<float>& a, const std::vector<float>& b, const std::vector<float>& c0,
                    std::int64_t batch, std::int64_t m, std::int64_t n, std::int64_t k, const MatmulOptions& o) {
  Reference r{std::vector<double>(std::size_t(batch * m * n)), std::vector<double>(std::size_t(batch * m * n))};
  const double u = std::ldexp(1.0, -24);
  for (std::int64_t p = 0; p < batch; ++p) {
    const float* pa = a.data() + p * m * k;
    const float* pb = b.data() + p * k * n;
    for (std::int64_t i = 0; i < m; ++i) {
      for (std::int64_t j = 0; j < n; ++j) {
        double s = 0, s_abs = 0;
        for (std::int64_t q = 0; q < k; ++q) {
          const double x = o.trans_a ? pa[q * m + i] : pa[i * k + q];
          const double y = o.trans_b ? pb[j * k + q] : pb[q * n + j];
          s += x * y;
          s_abs += std::abs(x * y);
        }
        const std::size_t idx = std::size_t((p * m + i) * n + j);
        const double old = o.beta == 0.f ? 0.0 : double(o.beta) * c0[idx];
        r.value[idx] = double(o.alpha) * s + old;
        r.bound[idx] = double(k + 4) * u * (std::abs(double(o.alpha)) * s_abs + std::abs(old)) + 1e-30;
      }
    }
  }
  return r;
}

class MatmulTest : public ::testing::TestWithParam<CpuGemmBackend> {
 protected:
  void SetUp() override {
    saved_ = cpu_gemm_backend();
    set_cpu_gemm_backend(GetParam());
  }
  void TearDown() override { set_cpu_gemm_backend(saved_); }

  // Runs one product of the given sizes and checks every element against its bound.
  void check(std::int64_t batch, std::int64_t m, std::int64_t n, std::int64_t k, const MatmulOptions& o, bool batched,
             std::uint32_t seed) {
    SCOPED_TRACE(::testing::Message() << "batch " << batch << " m " << m << " n " << n << " k " << k << " trans_a "
                                      << o.trans_a << " trans_b " << o.trans_b << " alpha " << o.alpha << " beta "
                                      << o.beta);
    std::mt19937 rng(seed);
    Shape sa = o.trans_a ? Shape{k, m} : Shape{m, k};
    Shape sb = o.trans_b ? Shape{n, k} : Shape{k, n};
    Shape sc{m, n};
    if (batched) {
      sa.insert(sa.begin(), batch);
      sb.insert(sb.begin(), batch);
      sc.insert(sc.begin(), batch);
    }
    Tensor a = random_tensor(sa, rng), b = random_tensor(sb, rng);
    // beta == 0 must overwrite: C's old contents may be NaN.
    Tensor c = o.beta == 0.f ? test::nan_tensor(sc) : random_tensor(sc, rng);
    const std::vector<float> c0 = c.to_vector<float>();
    matmul(a, b, c, o);
    const Reference r = reference(a.to_vector<float>(), b.to_vector<float>(), c0, batch, m, n, k, o);
    const std::vector<float> got = c.to_vector<float>();
    int bad = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      const double err = std::abs(double(got[i]) - r.value[i]);
      if (!(err <= r.bound[i]) && ++bad <= 5)
        ADD_FAILURE() << "element " << i << ": got " << got[i] << ", want " << r.value[i] << " (bound "
                      << r.bound[i] << ")";
    }
    EXPECT_EQ(bad, 0);
  }

 private:
  CpuGemmBackend saved_{};
};

TEST_P(MatmulTest, AwkwardSizesEveryTransposition) {
  const std::int64_t sizes[] = {0, 1, 2, 7, 13, 33};
  std::uint32_t seed = 1;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (std::int64_t m : sizes)
        for (std::int64_t n : sizes)
          for (std::int64_t k : sizes) check(1, m, n, k, {ta, tb, 1.f, 0.f}, false, seed++);
}

TEST_P(MatmulTest, LargerThanOneBlock) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) check(1, 67, 131, 257, {ta, tb, 1.f, 0.f}, false, 7);
}

TEST_P(MatmulTest, AlphaAndBeta) {
  std::uint32_t seed = 100;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (auto [alpha, beta] : {std::pair{2.5f, 0.f}, std::pair{1.f, 1.f}, std::pair{-0.5f, 0.75f},
                                 std::pair{0.f, 2.f}, std::pair{1.f, -1.f}})
        for (auto [m, n, k] : {std::tuple{5, 11, 3}, std::tuple{17, 1, 9}, std::tuple{4, 6, 0}})
          check(1, m, n, k, {ta, tb, alpha, beta}, false, seed++);
}

TEST_P(MatmulTest, Batched) {
  std::uint32_t seed = 200;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (auto [batch, m, n, k] :
           {std::tuple{1, 3, 4, 5}, std::tuple{3, 7, 5, 11}, std::tuple{5, 1, 13, 2}, std::tuple{2, 9, 9, 0},
            std::tuple{0, 3, 3, 3}, std::tuple{4, 0, 3, 2}})
        for (float beta : {0.f, 0.5f}) check(batch, m, n, k, {ta, tb, 1.5f, beta}, true, seed++);
}

TEST_P(MatmulTest, BatchEntriesAreIndependent) {
  // Batch entry i of A times entry i of B, and nothing else: entry 1 of B is
  // zero, so entry 1 of C must be exactly zero.
  std::mt19937 rng(5);
  Tensor a = random_tensor({3, 4, 6}, rng), b = random_tensor({3, 6, 5}, rng), c = test::nan_tensor({3, 4, 5});
  b[1].zero_();
  matmul(a, b, c);
  for (float v : c[1].to_vector<float>()) EXPECT_EQ(v, 0.f);
  for (float v : c[2].to_vector<float>()) EXPECT_NE(v, 0.f);
}

INSTANTIATE_TEST_SUITE_P(Backends, MatmulTest, ::testing::Values(CpuGemmBackend::kOpenBlas, CpuGemmBackend::kEigen),
                         [](const auto& info) {
                           return info.param == CpuGemmBackend::kOpenBlas ? std::string("OpenBlas")
                                                                          : std::string("Eigen");
                         });

TEST(Matmul, BackendSelection) {
  const CpuGemmBackend saved = cpu_gemm_backend();
  EXPECT_EQ(saved, CpuGemmBackend::kOpenBlas);  // the documented default
  set_cpu_gemm_backend(CpuGemmBackend::kEigen);
  EXPECT_EQ(cpu_gemm_backend(), CpuGemmBackend::kEigen);
  set_cpu_gemm_backend(saved);
}

TEST(Matmul, ExactOnSmallIntegers) {
  // [[1,2],[3,4]] @ [[5,6],[7,8]] = [[19,22],[43,50]], exactly, on both backends.
  const CpuGemmBackend saved = cpu_gemm_backend();
  for (auto be : {CpuGemmBackend::kOpenBlas, CpuGemmBackend::kEigen}) {
    set_cpu_gemm_backend(be);
    Tensor a = Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, {2, 2});
    Tensor b = Tensor::from_vector(std::vector<float>{5, 6, 7, 8}, {2, 2});
    Tensor c = Tensor::from_vector(std::vector<float>{1, 1, 1, 1}, {2, 2});
    matmul(a, b, c);
    EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{19, 22, 43, 50}));
    matmul(a, b, c, {.trans_a = true, .trans_b = false, .alpha = 1.f, .beta = 1.f});  // + [[26,30],[38,44]]
    EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{45, 52, 81, 94}));
  }
  set_cpu_gemm_backend(saved);
}

// f16 and bf16: the product of the 16-bit values in f32, rounded once, within
// half_rtol of the f32 product of the same values (2e-3 f16, 1e-2 bf16). With
// beta != 0, C's stored 16-bit values take part.
TEST(Matmul, HalfMatchesF32OnTheSameValues) {
  using test::random_half;
  const CpuGemmBackend saved = cpu_gemm_backend();
  std::mt19937 rng(300);
  for (auto be : {CpuGemmBackend::kOpenBlas, CpuGemmBackend::kEigen})
    for (DType dt : test::kHalfDtypes)
      for (bool ta : {false, true})
        for (bool tb : {false, true})
          for (auto [batch, m, n, k] : {std::tuple{0, 3, 3, 3}, std::tuple{0, 5, 11, 3}, std::tuple{0, 33, 17, 65},
                                        std::tuple{3, 7, 5, 11}, std::tuple{0, 4, 6, 0}})
            for (float beta : {0.f, 0.75f}) {
              set_cpu_gemm_backend(be);
              SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " batch " << batch << " " << m << "x" << n << "x"
                                                << k << " ta " << ta << " tb " << tb << " beta " << beta);
              Shape sa = ta ? Shape{k, m} : Shape{m, k}, sb = tb ? Shape{n, k} : Shape{k, n}, sc{m, n};
              if (batch)
                for (Shape* x : {&sa, &sb, &sc}) x->insert(x->begin(), batch);
              const auto a = random_half(sa, dt, rng), b = random_half(sb, dt, rng);
              const auto c = random_half(sc, dt, rng, -2.f, 2.f);
              const MatmulOptions o{ta, tb, 1.25f, beta};
              Tensor c16 = beta == 0.f ? test::nan_half(sc, dt) : c.half.clone();
              Tensor c32 = beta == 0.f ? test::nan_tensor(sc) : c.f32.clone();
              matmul(a.half, b.half, c16, o);
              matmul(a.f32, b.f32, c32, o);
              EXPECT_TRUE(test::half_close(c16, c32, dt));
              EXPECT_TRUE(test::rounded_once(c16, c32));  // the CPU multiplies in f32 and rounds at the end
            }
  set_cpu_gemm_backend(saved);
}

TEST(Matmul, Errors) {
  auto t = [](Shape s, DType d = DType::kF32) { return Tensor::zeros(s, d); };
  Tensor c;
  // Shapes that do not chain name all three shapes.
  c = t({3, 5});
  EXPECT_TRUE(throws_error([&] { matmul(t({3, 4}), t({5, 5}), c); }, ErrorKind::kShapeMismatch,
                           {"matmul", "[3, 4]", "[5, 5]", "[3, 5]"}));
  c = t({3, 6});
  EXPECT_TRUE(throws_error([&] { matmul(t({3, 4}), t({4, 5}), c); }, ErrorKind::kShapeMismatch, {"[3, 6]"}));
  // Transposes change what must chain.
  c = t({4, 5});
  EXPECT_TRUE(throws_error([&] { matmul(t({3, 4}), t({4, 5}), c, {.trans_a = true}); }, ErrorKind::kShapeMismatch,
                           {"[3, 4]^T"}));
  EXPECT_NO_THROW(matmul(t({3, 4}), t({3, 5}), c, {.trans_a = true}));
  c = t({3, 5});
  EXPECT_TRUE(throws_error([&] { matmul(t({3, 4}), t({4, 5}), c, {.trans_b = true}); }, ErrorKind::kShapeMismatch,
                           {"[4, 5]^T"}));
  EXPECT_NO_THROW(matmul(t({3, 4}), t({5, 4}), c, {.trans_b = true}));
  // Rank and batch.
  c = t({2, 3, 5});
  EXPECT_TRUE(throws_error([&] { matmul(t({3, 4}), t({4, 5}), c); }, ErrorKind::kShapeMismatch, {"2-d or all 3-d"}));
  EXPECT_TRUE(throws_error([&] { matmul(t({2, 3, 4}), t({3, 4, 5}), c); }, ErrorKind::kShapeMismatch,
                           {"batch sizes", "[3, 4, 5]"}));
  Tensor c1 = t({5});
  EXPECT_TRUE(throws_error([&] { matmul(t({5}), t({5}), c1); }, ErrorKind::kShapeMismatch, {}));
  Tensor c4 = t({1, 2, 3, 5});
  EXPECT_TRUE(throws_error([&] { matmul(t({1, 2, 3, 4}), t({1, 2, 4, 5}), c4); }, ErrorKind::kShapeMismatch, {}));
  // Dtypes.
  c = t({3, 5});
  EXPECT_TRUE(throws_error([&] { matmul(t({3, 4}, DType::kF16), t({4, 5}), c); }, ErrorKind::kDTypeMismatch,
                           {"f16", "f32"}));
  Tensor cb = t({3, 5}, DType::kBF16);
  EXPECT_TRUE(throws_error([&] { matmul(t({3, 4}, DType::kF16), t({4, 5}, DType::kF16), cb); },
                           ErrorKind::kDTypeMismatch, {"'c' is bf16", "'a' is f16"}));
  Tensor ci = t({3, 5}, DType::kI32);
  EXPECT_TRUE(throws_error([&] { matmul(t({3, 4}, DType::kI32), t({4, 5}, DType::kI32), ci); },
                           ErrorKind::kDTypeMismatch, {"i32"}));
  // Undefined operands.
  Tensor undef;
  EXPECT_TRUE(throws_error([&] { matmul(t({3, 4}), t({4, 5}), undef); }, ErrorKind::kInvalidArgument,
                           {"'c' is undefined"}));
}

}  // namespace
}  // namespace ht::ops::matmul_test
