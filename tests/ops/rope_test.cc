// Rotary position embeddings: the table against values PyTorch 1.13 computed
// in float32 (Hugging Face Llama's recipe), the rotation against a
// double-precision reference, backward as the transpose (finite differences
// and the inverse of forward), aliasing, 16-bit dtypes and argument errors.
#include "ht/ops/rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "half_util.h"
#include "test_util.h"

namespace ht::ops::rope_test {
namespace {

using test::all_close;
using test::finite_diff_grad;
using test::random_tensor;
using test::throws_error;

// y from x (B, T, H*D) with the table's (cos, sin), in double.
std::vector<double> rope_ref(const std::vector<double>& x, const std::vector<float>& table, std::int64_t b,
                             std::int64_t t, std::int64_t h, std::int64_t d, bool inverse = false) {
  std::vector<double> y(x.size());
  const std::int64_t half = d / 2;
  for (std::int64_t r = 0; r < b * t; ++r)
    for (std::int64_t hh = 0; hh < h; ++hh)
      for (std::int64_t i = 0; i < half; ++i) {
        const std::size_t at = std::size_t((r * h + hh) * d + i), pair = std::size_t(at + std::size_t(half));
        const double c = table[std::size_t(((r % t) * half + i) * 2)];
        const double s = (inverse ? -1.0 : 1.0) * table[std::size_t(((r % t) * half + i) * 2 + 1)];
        y[at] = x[at] * c - x[pair] * s;
        y[pair] = x[pair] * c + x[at] * s;
      }
  return y;
}

TEST(Rope, TableMatchesPyTorchFloat32) {
  // From PyTorch 1.13: inv_freq = 1.0 / (theta ** (torch.arange(0, D, 2).float() / D)),
  // freqs = inv_freq[:, None] @ float(t), then freqs.cos() and freqs.sin() (float32).
  struct Row {
    std::int64_t t;
    std::vector<float> cos, sin;
  };
  struct Table {
    float theta;
    std::int64_t d;
    std::vector<Row> rows;
  };
  const Table tables[] = {
      {10000.f,
       8,
       {{0, {1.f, 1.f, 1.f, 1.f}, {0.f, 0.f, 0.f, 0.f}},
        {1,
         {0.5403023362159729f, 0.9950041770935059f, 0.9999499917030334f, 0.9999995231628418f},
         {0.8414709568023682f, 0.0998334214091301f, 0.009999833069741726f, 0.0009999999310821295f}},
        {7,
         {0.7539022564888f, 0.7648422122001648f, 0.9975510239601135f, 0.9999755024909973f},
         {0.6569865942001343f, 0.6442176699638367f, 0.06994284689426422f, 0.0069999429397284985f}},
        {1000,
         {0.5623790621757507f, 0.8623188734054565f, -0.83907151222229f, 0.5403023362159729f},
         {0.8268795609474182f, -0.5063656568527222f, -0.5440211296081543f, 0.8414709568023682f}},
        {4095,
         {-0.06597599387168884f, 0.4598633348941803f, -0.9940330982208252f, -0.5789079070091248f},
         {-0.9978212118148804f, 0.8879896998405457f, -0.1090787947177887f, -0.8153929114341736f}}}},
      {500000.f,
       6,
       {{3, {-0.9899924993515015f, 0.9992857575416565f, 0.9999998807907104f},
         {0.14112000167369843f, 0.03778862580657005f, 0.00047622015699744225f}},
        {8191, {-0.6463904976844788f, -0.890461266040802f, 0.26726776361465454f},
         {-0.7630068063735962f, 0.45505908131599426f, 0.9636223316192627f}}}},
  };
  for (const Table& tb : tables) {
    const std::int64_t max_t = tb.rows.back().t + 1;
    const Tensor table = rope_table(max_t, tb.d, tb.theta);
    ASSERT_EQ(table.shape(), (Shape{max_t, tb.d / 2, 2}));
    ASSERT_EQ(table.dtype(), DType::kF32);
    const auto v = table.to_vector<float>();
    for (const Row& row : tb.rows)
      for (std::int64_t i = 0; i < tb.d / 2; ++i) {
        SCOPED_TRACE(::testing::Message() << "theta " << tb.theta << " D " << tb.d << " t " << row.t << " i " << i);
        // Within an ulp of PyTorch's float32 cos and sin (the angles agree bit for bit).
        EXPECT_NEAR(v[std::size_t((row.t * tb.d / 2 + i) * 2)], row.cos[std::size_t(i)], 1.2e-7);
        EXPECT_NEAR(v[std::size_t((row.t * tb.d / 2 + i) * 2 + 1)], row.sin[std::size_t(i)], 1.2e-7);
      }
  }
}

TEST(Rope, TableEdgesAndErrors) {
  EXPECT_EQ(rope_table(0, 4, 10000.f).shape(), (Shape{0, 2, 2}));
  const auto two = rope_table(3, 2, 10000.f).to_vector<float>();  // D = 2: inv_freq = 1, angle = t
  EXPECT_TRUE(all_close(two, {1, 0, std::cos(1.0), std::sin(1.0), std::cos(2.0), std::sin(2.0)}, 1e-7));
  EXPECT_TRUE(throws_error([] { rope_table(4, 5, 10000.f); }, ErrorKind::kInvalidArgument, {"head_dim=5", "even"}));
  EXPECT_TRUE(throws_error([] { rope_table(4, 0, 10000.f); }, ErrorKind::kInvalidArgument, {"head_dim=0"}));
  EXPECT_TRUE(throws_error([] { rope_table(4, 8, 0.f); }, ErrorKind::kInvalidArgument, {"theta=0"}));
  EXPECT_TRUE(throws_error([] { rope_table(4, 8, NAN); }, ErrorKind::kInvalidArgument, {"theta=nan"}));
  EXPECT_TRUE(throws_error([] { rope_table(-1, 8, 10000.f); }, ErrorKind::kInvalidArgument, {"max_positions=-1"}));
  // Llama 3.1's scaling: D = 2 has one frequency, 1 (wavelength 2 pi).
  // Context 4 puts it between the bands (4 / high 4 = 1 < 2 pi < 4 / low
  // 0.5 = 8): interpolated; context 2 above them (2 pi > 2 / 1): divided;
  // context 32 below them (2 pi < 32 / 4): kept.
  const RopeScaling band{.factor = 8.f, .low_freq_factor = 0.5f, .high_freq_factor = 4.f, .original_max_positions = 4};
  const float smooth = ((1.f / (1.f * float(2.0 * std::numbers::pi))) * 4.f - 0.5f) / 3.5f;
  const float between = (1.f - smooth) * 1.f / 8.f + smooth * 1.f;
  EXPECT_NEAR(rope_table(2, 2, 10000.f, band).to_vector<float>()[2], std::cos(double(between)), 1e-7);
  const RopeScaling above{.factor = 8.f, .low_freq_factor = 1.f, .high_freq_factor = 4.f, .original_max_positions = 2};
  EXPECT_NEAR(rope_table(2, 2, 10000.f, above).to_vector<float>()[2], std::cos(1.0 / 8), 1e-7);
  const RopeScaling below{.factor = 8.f, .low_freq_factor = 1.f, .high_freq_factor = 4.f, .original_max_positions = 32};
  EXPECT_EQ(rope_table(3, 2, 10000.f, below).to_vector<float>(), two);
  for (const RopeScaling bad : {RopeScaling{.factor = 0.5f}, RopeScaling{.factor = -2.f},
                                RopeScaling{.factor = 8.f, .low_freq_factor = 4.f, .high_freq_factor = 4.f},
                                RopeScaling{.factor = 8.f, .original_max_positions = 0}})
    EXPECT_TRUE(throws_error([&] { rope_table(4, 8, 10000.f, bad); }, ErrorKind::kInvalidArgument, {"llama3 scaling"}));
}

struct Case {
  std::int64_t b, t, h, d, t_max;
};
// T = 1, primes, D = 2, one head, a table longer than the sequence.
const Case kCases[] = {{1, 1, 1, 2, 1}, {2, 5, 3, 4, 5}, {1, 7, 2, 6, 9}, {3, 4, 1, 16, 4}, {2, 13, 4, 64, 20},
                       {0, 3, 2, 4, 3}};

TEST(Rope, ForwardMatchesDoubleReference) {
  std::mt19937 rng(61);
  for (auto [b, t, h, d, t_max] : kCases) {
    SCOPED_TRACE(::testing::Message() << "B " << b << " T " << t << " H " << h << " D " << d);
    const Tensor table = rope_table(t_max, d, 10000.f);
    const Tensor x = random_tensor({b, t, h * d}, rng, -2.f, 2.f);
    Tensor y = test::nan_tensor(x.shape());
    rope_forward(x, table, int(h), y);
    EXPECT_TRUE(all_close(y.to_vector<float>(), rope_ref(test::to_double(x), table.to_vector<float>(), b, t, h, d), 1e-6));
    // Position 0 is the identity; y may alias x.
    if (b > 0) EXPECT_EQ(y[0][0].to_vector<float>(), x[0][0].to_vector<float>());
    Tensor in_place = x.clone();
    rope_forward(in_place, table, int(h), in_place);
    EXPECT_EQ(in_place.to_vector<float>(), y.to_vector<float>());
  }
}

TEST(Rope, BackwardIsTheTransposeAndInvertsForward) {
  std::mt19937 rng(62);
  for (auto [b, t, h, d, t_max] : kCases) {
    SCOPED_TRACE(::testing::Message() << "B " << b << " T " << t << " H " << h << " D " << d);
    const Tensor table = rope_table(t_max, d, 500000.f);
    const auto vt = table.to_vector<float>();
    const Tensor x = random_tensor({b, t, h * d}, rng), w = random_tensor({b, t, h * d}, rng);  // L = sum w * y
    Tensor dx = test::nan_tensor(x.shape());
    rope_backward(w, table, int(h), dx);
    const auto vw = test::to_double(w);
    const auto want = finite_diff_grad(
        [&](const std::vector<double>& xx) {
          const auto y = rope_ref(xx, vt, b, t, h, d);
          double l = 0;
          for (std::size_t i = 0; i < y.size(); ++i) l += vw[i] * y[i];
          return l;
        },
        test::to_double(x));
    EXPECT_TRUE(all_close(dx.to_vector<float>(), want, 1e-5, 1e-7));
    // Backward of forward gives x back (cos^2 + sin^2 = 1 up to f32 rounding); dx may alias dy.
    Tensor y = Tensor::empty(x.shape(), DType::kF32);
    rope_forward(x, table, int(h), y);
    rope_backward(y, table, int(h), y);
    EXPECT_TRUE(all_close(y.to_vector<float>(), test::to_double(x), 1e-6));
  }
}

TEST(Rope, HalfMatchesF32OnTheSameValues) {
  using test::half_close;
  std::mt19937 rng(63);
  for (DType dt : test::kHalfDtypes)
    for (auto [b, t, h, d, t_max] : kCases) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " B " << b << " T " << t << " H " << h << " D " << d);
      const Tensor table = rope_table(t_max, d, 10000.f);
      const auto x = test::random_half({b, t, h * d}, dt, rng, -3.f, 3.f);
      Tensor y16 = test::nan_half(x.half.shape(), dt), y32 = test::nan_tensor(x.half.shape());
      rope_forward(x.half, table, int(h), y16);
      rope_forward(x.f32, table, int(h), y32);
      EXPECT_TRUE(test::rounded_once(y16, y32));
      Tensor dx16 = x.half.clone(), dx32 = test::nan_tensor(x.half.shape());
      rope_backward(dx16, table, int(h), dx16);  // in place
      rope_backward(x.f32, table, int(h), dx32);
      EXPECT_TRUE(test::rounded_once(dx16, dx32));
    }
}

TEST(Rope, Errors) {
  auto t = [](Shape s, DType d = DType::kF32) { return Tensor::zeros(s, d); };
  const Tensor table = rope_table(8, 4, 10000.f);
  Tensor y = t({2, 5, 12});
  EXPECT_TRUE(throws_error([&] { rope_forward(t({2, 5, 12}), table, 5, y); }, ErrorKind::kShapeMismatch,
                           {"rope_forward", "n_head=5", "[2, 5, 12]"}));
  EXPECT_TRUE(throws_error([&] { rope_forward(t({2, 5, 12}), table, 0, y); }, ErrorKind::kShapeMismatch,
                           {"n_head=0"}));
  EXPECT_TRUE(throws_error([&] { rope_forward(t({2, 5, 12}), table, 4, y); }, ErrorKind::kShapeMismatch,
                           {"head dimension 3", "odd"}));
  EXPECT_TRUE(throws_error([&] { rope_forward(t({2, 5, 12}), table, 2, y); }, ErrorKind::kShapeMismatch,
                           {"table [8, 2, 2]", "D/2 = 3", "rope_table(max_positions, 6, theta)"}));
  const Tensor short_table = rope_table(4, 4, 10000.f);
  EXPECT_TRUE(throws_error([&] { rope_forward(t({2, 5, 12}), short_table, 3, y); }, ErrorKind::kShapeMismatch,
                           {"holds 4 positions", "has 5", "max_positions >= 5"}));
  const Tensor table16 = t({8, 2, 2}, DType::kF16);
  EXPECT_TRUE(throws_error([&] { rope_forward(t({2, 5, 12}), table16, 3, y); }, ErrorKind::kDTypeMismatch,
                           {"'table' must be f32"}));
  Tensor y_wrong = t({2, 5, 8});
  EXPECT_TRUE(throws_error([&] { rope_forward(t({2, 5, 12}), table, 3, y_wrong); }, ErrorKind::kShapeMismatch,
                           {"'y' must have shape [2, 5, 12]"}));
  EXPECT_TRUE(throws_error([&] { rope_forward(t({10, 12}), table, 3, y); }, ErrorKind::kShapeMismatch, {"3-d"}));
  Tensor dx = t({2, 5, 12}, DType::kBF16);
  EXPECT_TRUE(throws_error([&] { rope_backward(t({2, 5, 12}), table, 3, dx); }, ErrorKind::kDTypeMismatch,
                           {"rope_backward", "'dx' is bf16", "'dy' is f32"}));
}

}  // namespace
}  // namespace ht::ops::rope_test
