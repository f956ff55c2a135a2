// Packed causal attention (GPT-2's qkv) against the double-precision
// reference with the softmax materialised (attention_reference.h): out, lse
// and dqkv over sequence lengths around the CPU tiles, f16/bf16 inputs, the
// causal structure (the future never reaches the past), agreement with the
// general form, and argument errors.
#include "ht/ops/attention.h"

#include <gtest/gtest.h>

#include <cmath>

#include "attention_reference.h"
#include "half_util.h"
#include "test_util.h"

namespace ht::ops::attention_test {
namespace {

using test::all_close;
using test::random_tensor;
using test::throws_error;

struct Dims {
  std::int64_t b, t, c, h;
};

std::ostream& operator<<(std::ostream& os, const Dims& d) {
  return os << "B " << d.b << " T " << d.t << " C " << d.c << " H " << d.h;
}

// The three thirds of a packed (B, T, 3C) tensor as separate (B, T, C) vectors.
void split(const std::vector<double>& qkv, const Dims& d, std::vector<double>& q, std::vector<double>& k,
           std::vector<double>& v) {
  q.resize(std::size_t(d.b * d.t * d.c));
  k.resize(q.size());
  v.resize(q.size());
  for (std::int64_t r = 0; r < d.b * d.t; ++r)
    for (std::int64_t c = 0; c < d.c; ++c) {
      q[std::size_t(r * d.c + c)] = qkv[std::size_t(r * 3 * d.c + c)];
      k[std::size_t(r * d.c + c)] = qkv[std::size_t(r * 3 * d.c + d.c + c)];
      v[std::size_t(r * d.c + c)] = qkv[std::size_t(r * 3 * d.c + 2 * d.c + c)];
    }
}

std::vector<double> join(const std::vector<double>& q, const std::vector<double>& k, const std::vector<double>& v,
                         const Dims& d) {
  std::vector<double> qkv(std::size_t(d.b * d.t * 3 * d.c));
  for (std::int64_t r = 0; r < d.b * d.t; ++r)
    for (std::int64_t c = 0; c < d.c; ++c) {
      qkv[std::size_t(r * 3 * d.c + c)] = q[std::size_t(r * d.c + c)];
      qkv[std::size_t(r * 3 * d.c + d.c + c)] = k[std::size_t(r * d.c + c)];
      qkv[std::size_t(r * 3 * d.c + 2 * d.c + c)] = v[std::size_t(r * d.c + c)];
    }
  return qkv;
}

Tensor widened(const Tensor& t) { return t.dtype() == DType::kF32 ? t : test::cast_to(t, DType::kF32); }

// Runs forward and backward in `dtype` on random inputs (rounded to it) and
// compares with the reference on the same values.
::testing::AssertionResult matches_reference(const Dims& d, DType dtype, float range) {
  std::mt19937 rng(std::uint32_t(d.t * 31 + d.c));
  Tensor qkv = random_tensor({d.b, d.t, 3 * d.c}, rng, -range, range);
  Tensor dout = random_tensor({d.b, d.t, d.c}, rng);
  if (dtype != DType::kF32) qkv = test::cast_to(qkv, dtype), dout = test::cast_to(dout, dtype);
  Tensor out = Tensor::empty({d.b, d.t, d.c}, dtype), lse = test::nan_tensor({d.b, d.h, d.t});
  Tensor dqkv = Tensor::empty(qkv.shape(), dtype);
  out.fill_(NAN);
  dqkv.fill_(NAN);
  attention_forward(qkv, int(d.h), out, lse);
  attention_backward(dout, qkv, out, lse, int(d.h), dqkv);

  const test::AttentionRefShape s{d.b, d.t, d.h, d.h, d.c / d.h, true};
  std::vector<double> q, k, v;
  split(test::to_double(widened(qkv)), d, q, k, v);
  const test::AttentionRef ref = test::attention_reference(s, q, k, v, {});
  const test::AttentionRefGrads g = test::attention_reference_backward(s, q, k, v, ref, test::to_double(widened(dout)));
  const bool f32 = dtype == DType::kF32;
  if (auto a = all_close(widened(out).to_vector<float>(), ref.out, f32 ? 2e-5 : test::half_rtol(dtype)); !a)
    return a << " (out)";
  if (auto a = all_close(lse.to_vector<float>(), ref.lse, 2e-6); !a) return a << " (lse)";
  if (auto a = all_close(widened(dqkv).to_vector<float>(), join(g.dq, g.dk, g.dv, d),
                         f32 ? 5e-5 : 2 * test::half_rtol(dtype));
      !a)
    return a << " (dqkv)";
  return ::testing::AssertionSuccess();
}

// T: 1, below a CPU tile (64), one tile, not a multiple, several tiles.
const Dims kDims[] = {{1, 1, 4, 1},  {2, 5, 6, 2},    {1, 7, 12, 3},  {2, 64, 16, 2},
                      {2, 65, 8, 1}, {1, 100, 24, 3}, {2, 200, 16, 2}, {1, 300, 8, 4}};

TEST(Attention, MatchesMaterialisedReference) {
  for (const Dims& d : kDims)
    for (float range : {1.f, 4.f}) {  // 4: peaked softmax rows
      SCOPED_TRACE(::testing::Message() << d << " range " << range);
      EXPECT_TRUE(matches_reference(d, DType::kF32, range));
    }
}

TEST(Attention, HalfDtypesMatchReference) {
  for (const DType dt : test::kHalfDtypes)
    for (const Dims& d : {Dims{2, 5, 6, 2}, Dims{2, 100, 32, 2}}) {
      SCOPED_TRACE(::testing::Message() << d << " " << dtype_name(dt));
      EXPECT_TRUE(matches_reference(d, dt, 2.f));
    }
}

// Changing position j's inputs changes no output row before j and every
// row from j on: the future never reaches the past.
TEST(Attention, CausalStructure) {
  const Dims d{1, 150, 8, 2};
  std::mt19937 rng(5);
  const Tensor qkv = random_tensor({d.b, d.t, 3 * d.c}, rng);
  Tensor out = Tensor::zeros({d.b, d.t, d.c}, DType::kF32), lse = Tensor::zeros({d.b, d.h, d.t}, DType::kF32);
  attention_forward(qkv, int(d.h), out, lse);
  const std::int64_t j = 90;  // in the second tile
  auto changed = qkv.to_vector<float>();
  for (std::int64_t c = 0; c < 3 * d.c; ++c) changed[std::size_t(j * 3 * d.c + c)] += 0.5f;
  Tensor out2 = Tensor::zeros(out.shape(), DType::kF32), lse2 = Tensor::zeros(lse.shape(), DType::kF32);
  attention_forward(Tensor::from_vector(changed, qkv.shape()), int(d.h), out2, lse2);
  const auto o1 = out.to_vector<float>(), o2 = out2.to_vector<float>();
  for (std::int64_t i = 0; i < d.t; ++i) {
    const bool same = std::equal(o1.begin() + i * d.c, o1.begin() + (i + 1) * d.c, o2.begin() + i * d.c);
    EXPECT_EQ(same, i < j) << "row " << i;
  }
}

TEST(Attention, EqualsGeneralForm) {
  const Dims d{2, 97, 16, 4};
  std::mt19937 rng(9);
  const Tensor qkv = random_tensor({d.b, d.t, 3 * d.c}, rng), dout = random_tensor({d.b, d.t, d.c}, rng);
  Tensor out = Tensor::zeros({d.b, d.t, d.c}, DType::kF32), lse = Tensor::zeros({d.b, d.h, d.t}, DType::kF32), dqkv = Tensor::zeros(qkv.shape(), DType::kF32);
  attention_forward(qkv, int(d.h), out, lse);
  attention_backward(dout, qkv, out, lse, int(d.h), dqkv);
  std::vector<double> q, k, v;
  split(test::to_double(qkv), d, q, k, v);
  const auto f = [&](const std::vector<double>& x) {
    return Tensor::from_vector(std::vector<float>(x.begin(), x.end()), {d.b, d.t, d.c});
  };
  const Tensor qt = f(q), kt = f(k), vt = f(v);
  Tensor out2 = Tensor::zeros(out.shape(), DType::kF32), lse2 = Tensor::zeros(lse.shape(), DType::kF32);
  Tensor dq = Tensor::zeros(qt.shape(), DType::kF32), dk = Tensor::zeros(qt.shape(), DType::kF32), dv = Tensor::zeros(qt.shape(), DType::kF32);
  attention_forward(qt, kt, vt, {int(d.h), int(d.h), true}, nullptr, out2, lse2);
  attention_backward(dout, qt, kt, vt, out2, lse2, {int(d.h), int(d.h), true}, nullptr, dq, dk, dv);
  EXPECT_EQ(out.to_vector<float>(), out2.to_vector<float>());
  EXPECT_EQ(lse.to_vector<float>(), lse2.to_vector<float>());
  const auto joined = join(test::to_double(dq), test::to_double(dk), test::to_double(dv), d);
  const auto got = dqkv.to_vector<float>();
  EXPECT_EQ(got, std::vector<float>(joined.begin(), joined.end()));
}

TEST(Attention, EmptyBatchIsANoOp) {
  Tensor qkv = Tensor::zeros({0, 5, 36}, DType::kF32), out = Tensor::zeros({0, 5, 12}, DType::kF32), lse = Tensor::zeros({0, 2, 5}, DType::kF32);
  Tensor dqkv = Tensor::zeros({0, 5, 36}, DType::kF32);
  EXPECT_NO_THROW(attention_forward(qkv, 2, out, lse));
  EXPECT_NO_THROW(attention_backward(out, qkv, out, lse, 2, dqkv));
}

TEST(Attention, HalfDtypesMustNotMix) {
  auto t = [](Shape s, DType d) { return Tensor::zeros(s, d); };
  Tensor out = t({2, 5, 12}, DType::kF16), lse = t({2, 4, 5}, DType::kF32);
  EXPECT_TRUE(throws_error([&] { attention_forward(t({2, 5, 36}, DType::kBF16), 4, out, lse); },
                           ErrorKind::kDTypeMismatch, {"attention_forward", "'out' is f16", "'qkv' is bf16"}));
  Tensor dqkv = t({2, 5, 36}, DType::kF16);
  EXPECT_TRUE(throws_error([&] { attention_backward(t({2, 5, 12}, DType::kF32), t({2, 5, 36}, DType::kF16), out, lse, 4,
                                                    dqkv); },
                           ErrorKind::kDTypeMismatch, {"attention_backward", "'qkv' is f16", "'dout' is f32"}));
  // lse stays f32 in a 16-bit call.
  Tensor lse16 = t({2, 4, 5}, DType::kF16);
  EXPECT_TRUE(throws_error([&] { attention_forward(t({2, 5, 36}, DType::kF16), 4, out, lse16); },
                           ErrorKind::kDTypeMismatch, {"'lse' must be f32", "f16"}));
}

TEST(Attention, Errors) {
  auto t = [](Shape s, DType d = DType::kF32) { return Tensor::zeros(s, d); };
  Tensor out = t({2, 5, 12}), lse = t({2, 5, 5});
  // n_head must divide C.
  EXPECT_TRUE(throws_error([&] { attention_forward(t({2, 5, 36}), 5, out, lse); }, ErrorKind::kShapeMismatch,
                           {"attention_forward", "n_head=5", "C=12"}));
  EXPECT_TRUE(throws_error([&] { attention_forward(t({2, 5, 36}), 0, out, lse); }, ErrorKind::kShapeMismatch,
                           {"n_head=0"}));
  Tensor dqkv = t({2, 5, 36});
  EXPECT_TRUE(throws_error([&] { attention_backward(out, t({2, 5, 36}), out, lse, 7, dqkv); },
                           ErrorKind::kShapeMismatch, {"attention_backward", "n_head=7", "C=12"}));
  // qkv's last dimension must be 3C; it must be 3-d and of the compute dtype.
  EXPECT_TRUE(throws_error([&] { attention_forward(t({2, 5, 35}), 1, out, lse); }, ErrorKind::kShapeMismatch,
                           {"3*C", "[2, 5, 35]"}));
  EXPECT_TRUE(throws_error([&] { attention_forward(t({10, 36}), 1, out, lse); }, ErrorKind::kShapeMismatch, {"3-d"}));
  EXPECT_TRUE(throws_error([&] { attention_forward(t({2, 5, 36}, DType::kF16), 1, out, lse); },
                           ErrorKind::kDTypeMismatch, {"f16"}));
  // Output shapes.
  Tensor lse_wrong = t({2, 1, 5});
  EXPECT_TRUE(throws_error([&] { attention_forward(t({2, 5, 36}), 4, out, lse_wrong); }, ErrorKind::kShapeMismatch,
                           {"'lse'", "[2, 4, 5]"}));
  Tensor out_wrong = t({2, 5, 36}), lse4 = t({2, 4, 5});
  EXPECT_TRUE(throws_error([&] { attention_forward(t({2, 5, 36}), 4, out_wrong, lse4); }, ErrorKind::kShapeMismatch,
                           {"'out'", "[2, 5, 12]"}));
  Tensor dqkv_wrong = t({2, 5, 12});
  EXPECT_TRUE(throws_error([&] { attention_backward(out, t({2, 5, 36}), out, lse4, 4, dqkv_wrong); },
                           ErrorKind::kShapeMismatch, {"'dqkv'"}));
  EXPECT_TRUE(throws_error([&] { attention_backward(t({2, 4, 12}), t({2, 5, 36}), out, lse4, 4, dqkv); },
                           ErrorKind::kShapeMismatch, {"'dout'"}));
  EXPECT_TRUE(throws_error([&] { attention_backward(out, t({2, 5, 36}), out_wrong, lse4, 4, dqkv); },
                           ErrorKind::kShapeMismatch, {"'out'"}));
}

}  // namespace
}  // namespace ht::ops::attention_test
