// General attention (separate q, k, v; grouped-query heads; causal or not;
// key padding masks) against the double-precision reference with the softmax
// materialised (attention_reference.h): out, lse, dq, dk and dv over sequence
// lengths around the CPU driver's tiles (1, below a tile, not a multiple of
// it, several tiles), rows with no admissible key, determinism across thread
// counts, f16/bf16 inputs, that the comparisons catch wrong results, and
// argument errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <optional>

#include "attention_reference.h"
#include "half_util.h"
#include "ht/ops/attention.h"
#include "test_util.h"

namespace ht::ops::attention_general_test {
namespace {

using test::all_close;
using test::AttentionRef;
using test::AttentionRefGrads;
using test::AttentionRefShape;
using test::random_tensor;
using test::throws_error;

// How the key mask of a case is built.
enum class MaskKind {
  kNone,
  kRandom,   // each key kept with probability 0.6; key 0 masked in every batch entry
  kPadding,  // batch entry b keeps keys [0, t - b); entry 0 keeps none (fully masked)
  kLeftPad,  // batch entry b masks its first 70 b keys (more than a CPU tile for b = 1)
};

struct Cfg {
  std::int64_t b, t, h, kv, d;
  bool causal;
  MaskKind mask;
};

std::ostream& operator<<(std::ostream& os, const Cfg& c) {
  return os << "B " << c.b << " T " << c.t << " H " << c.h << " KV " << c.kv << " D " << c.d << " causal "
            << c.causal << " mask " << int(c.mask);
}

std::vector<std::int32_t> make_mask(const Cfg& c, std::mt19937& rng) {
  if (c.mask == MaskKind::kNone) return {};
  std::vector<std::int32_t> m(std::size_t(c.b * c.t));
  std::bernoulli_distribution keep(0.6);
  for (std::int64_t b = 0; b < c.b; ++b)
    for (std::int64_t j = 0; j < c.t; ++j) {
      std::int32_t v = 1;
      if (c.mask == MaskKind::kRandom) v = j == 0 ? 0 : (keep(rng) ? 1 + std::int32_t(j % 3) : 0);  // any nonzero keeps
      if (c.mask == MaskKind::kPadding) v = b > 0 && j < c.t - b ? 1 : 0;
      if (c.mask == MaskKind::kLeftPad) v = j >= 70 * b ? 1 : 0;
      m[std::size_t(b * c.t + j)] = v;
    }
  return m;
}

// One case's inputs (f32 on the host, or rounded to a 16-bit dtype and
// widened back exactly), the reference on exactly those values, and the op's
// results widened to f32.
struct CaseRun {
  AttentionRef ref;
  AttentionRefGrads ref_grads;
  std::vector<float> out, lse, dq, dk, dv;
};

Tensor rounded(const Tensor& t, DType dtype) { return dtype == DType::kF32 ? t : test::cast_to(t, dtype); }
Tensor widened(const Tensor& t) { return t.dtype() == DType::kF32 ? t : test::cast_to(t, DType::kF32); }

CaseRun run_case(const Cfg& c, DType dtype, std::uint32_t seed = 7) {
  std::mt19937 rng(seed);
  const Tensor q = rounded(random_tensor({c.b, c.t, c.h * c.d}, rng, -2.f, 2.f), dtype);
  const Tensor k = rounded(random_tensor({c.b, c.t, c.kv * c.d}, rng, -2.f, 2.f), dtype);
  const Tensor v = rounded(random_tensor({c.b, c.t, c.kv * c.d}, rng), dtype);
  const Tensor dout = rounded(random_tensor({c.b, c.t, c.h * c.d}, rng), dtype);
  const std::vector<std::int32_t> mask = make_mask(c, rng);
  const std::optional<Tensor> mask_t =
      mask.empty() ? std::nullopt : std::optional<Tensor>(Tensor::from_vector(mask, {c.b, c.t}));
  const AttentionOptions o{int(c.h), int(c.kv), c.causal};
  Tensor out = Tensor::empty(q.shape(), dtype), lse = Tensor::empty({c.b, c.h, c.t}, DType::kF32);
  out.fill_(NAN);
  lse.fill_(NAN);
  attention_forward(q, k, v, o, mask_t ? &*mask_t : nullptr, out, lse);
  Tensor dq = Tensor::empty(q.shape(), dtype), dk = Tensor::empty(k.shape(), dtype), dv = Tensor::empty(v.shape(), dtype);
  dq.fill_(NAN);
  dk.fill_(NAN);
  dv.fill_(NAN);
  attention_backward(dout, q, k, v, out, lse, o, mask_t ? &*mask_t : nullptr, dq, dk, dv);

  CaseRun r;
  const AttentionRefShape s{c.b, c.t, c.h, c.kv, c.d, c.causal};
  const auto qd = test::to_double(widened(q)), kd = test::to_double(widened(k)), vd = test::to_double(widened(v));
  r.ref = test::attention_reference(s, qd, kd, vd, mask);
  r.ref_grads = test::attention_reference_backward(s, qd, kd, vd, r.ref, test::to_double(widened(dout)));
  r.out = widened(out).to_vector<float>();
  r.lse = lse.to_vector<float>();
  r.dq = widened(dq).to_vector<float>();
  r.dk = widened(dk).to_vector<float>();
  r.dv = widened(dv).to_vector<float>();
  return r;
}

// lse: -inf exactly where the reference has a row without keys, else all_close.
::testing::AssertionResult lse_close(const std::vector<float>& got, const std::vector<double>& want, double rtol) {
  std::vector<float> g;
  std::vector<double> w;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(want[i]) || std::isinf(got[i]) || std::isnan(got[i])) {
      if (!(std::isinf(want[i]) && got[i] == -INFINITY))
        return ::testing::AssertionFailure() << "lse row " << i << ": got " << got[i] << ", want " << want[i];
      continue;
    }
    g.push_back(got[i]);
    w.push_back(want[i]);
  }
  return all_close(g, w, rtol);
}

struct Tolerance {
  double out, lse, grad;
};

// f32: errors of a few f32 roundings on sums over up to a few hundred terms.
// 16-bit: the inputs are exact in both; out and the gradients are rounded
// once to the dtype (half_rtol), the gradients also carry the rounding of
// out in D = rowsum(dO O).
Tolerance tolerance(DType dtype) {
  if (dtype == DType::kF32) return {2e-5, 2e-6, 5e-5};
  return {test::half_rtol(dtype), 2e-6, 2 * test::half_rtol(dtype)};
}

::testing::AssertionResult matches_reference(const CaseRun& r, DType dtype) {
  const Tolerance tol = tolerance(dtype);
  if (auto a = all_close(r.out, r.ref.out, tol.out); !a) return a << " (out)";
  if (auto a = lse_close(r.lse, r.ref.lse, tol.lse); !a) return a << " (lse)";
  // A gradient may be zero where terms cancel (dq of one key: P (dP - D)
  // with P = 1), and the kernel's rounding of dP and D then leaves a few
  // ulps of their size, which depends on the CPU's fused multiply-adds: the
  // case's largest gradient is the absolute scale.
  double grads = 0;
  for (const auto* g : {&r.ref_grads.dq, &r.ref_grads.dk, &r.ref_grads.dv})
    for (double v : *g) grads = std::max(grads, std::abs(v));
  const double atol = tol.grad * grads;
  if (auto a = all_close(r.dq, r.ref_grads.dq, tol.grad, atol); !a) return a << " (dq)";
  if (auto a = all_close(r.dk, r.ref_grads.dk, tol.grad, atol); !a) return a << " (dk)";
  if (auto a = all_close(r.dv, r.ref_grads.dv, tol.grad, atol); !a) return a << " (dv)";
  return ::testing::AssertionSuccess();
}

// Sequence lengths around the CPU tiles (64 query rows x 64 keys): 1, below
// a tile, exactly one, not a multiple, several. GQA with KV = 1 and H / 2.
const Cfg kCases[] = {
    {1, 1, 2, 2, 8, true, MaskKind::kNone},      {2, 1, 4, 1, 8, false, MaskKind::kPadding},
    {2, 5, 4, 2, 8, true, MaskKind::kNone},      {2, 5, 4, 4, 8, false, MaskKind::kRandom},
    {2, 64, 2, 1, 16, true, MaskKind::kNone},    {2, 64, 2, 2, 16, false, MaskKind::kPadding},
    {2, 100, 4, 2, 16, true, MaskKind::kPadding}, {2, 100, 4, 1, 12, false, MaskKind::kRandom},
    {2, 130, 2, 1, 8, true, MaskKind::kLeftPad}, {2, 130, 4, 2, 8, false, MaskKind::kLeftPad},
    {1, 200, 2, 2, 16, true, MaskKind::kRandom}, {3, 200, 4, 2, 8, false, MaskKind::kNone},
    {1, 257, 2, 1, 5, true, MaskKind::kNone},
};

TEST(AttentionGeneral, MatchesMaterialisedReference) {
  for (const Cfg& c : kCases) {
    SCOPED_TRACE(::testing::Message() << c);
    EXPECT_TRUE(matches_reference(run_case(c, DType::kF32), DType::kF32));
  }
}

TEST(AttentionGeneral, HalfDtypesMatchReference) {
  const Cfg cases[] = {{2, 5, 4, 2, 8, true, MaskKind::kNone},
                       {2, 100, 4, 2, 16, true, MaskKind::kPadding},
                       {2, 130, 4, 1, 8, false, MaskKind::kLeftPad}};
  for (const DType dt : test::kHalfDtypes)
    for (const Cfg& c : cases) {
      SCOPED_TRACE(::testing::Message() << c << " " << dtype_name(dt));
      EXPECT_TRUE(matches_reference(run_case(c, dt), dt));
    }
}

// A row whose keys are all masked (batch entry 0 of kPadding; the first 70
// queries of entry 1 of a causal kLeftPad) has an output of exact zeros, lse
// -inf, and contributes exactly nothing: its dq row is zero.
TEST(AttentionGeneral, RowsWithoutKeysAreZero) {
  for (const Cfg& c : {Cfg{2, 100, 4, 2, 16, true, MaskKind::kPadding}, Cfg{2, 130, 2, 1, 8, true, MaskKind::kLeftPad}}) {
    SCOPED_TRACE(::testing::Message() << c);
    const CaseRun r = run_case(c, DType::kF32);
    int empty_rows = 0;
    for (std::int64_t b = 0; b < c.b; ++b)
      for (std::int64_t h = 0; h < c.h; ++h)
        for (std::int64_t i = 0; i < c.t; ++i) {
          if (!std::isinf(r.ref.lse[std::size_t((b * c.h + h) * c.t + i)])) continue;
          ++empty_rows;
          ASSERT_EQ(r.lse[std::size_t((b * c.h + h) * c.t + i)], -INFINITY);
          for (std::int64_t x = 0; x < c.d; ++x) {
            const std::size_t at = std::size_t((b * c.t + i) * c.h * c.d + h * c.d + x);
            ASSERT_EQ(r.out[at], 0.f) << "b " << b << " h " << h << " i " << i;
            ASSERT_EQ(r.dq[at], 0.f) << "b " << b << " h " << h << " i " << i;
          }
        }
    EXPECT_GE(empty_rows, 70 * c.h) << "the case must contain rows without keys";
  }
}

// The reference's backward against finite differences of its own forward
// (loss = sum(out * w)), so the analytic reference is itself checked.
TEST(AttentionGeneral, ReferenceBackwardMatchesFiniteDifferences) {
  const AttentionRefShape s{2, 6, 4, 2, 3, true};
  std::mt19937 rng(3);
  const auto q = test::to_double(random_tensor({2, 6, 12}, rng)), k = test::to_double(random_tensor({2, 6, 6}, rng)),
             v = test::to_double(random_tensor({2, 6, 6}, rng)), w = test::to_double(random_tensor({2, 6, 12}, rng));
  const std::vector<std::int32_t> mask{0, 1, 1, 0, 1, 1, 0, 0, 1, 1, 1, 1};
  const auto loss = [&](const std::vector<double>& qq, const std::vector<double>& kk, const std::vector<double>& vv) {
    const AttentionRef r = test::attention_reference(s, qq, kk, vv, mask);
    double l = 0;
    for (std::size_t i = 0; i < w.size(); ++i) l += r.out[i] * w[i];
    return l;
  };
  const AttentionRefGrads g = test::attention_reference_backward(s, q, k, v, test::attention_reference(s, q, k, v, mask), w);
  const auto as_float = [](const std::vector<double>& x) { return std::vector<float>(x.begin(), x.end()); };
  EXPECT_TRUE(all_close(as_float(g.dq), test::finite_diff_grad([&](const auto& x) { return loss(x, k, v); }, q), 1e-6));
  EXPECT_TRUE(all_close(as_float(g.dk), test::finite_diff_grad([&](const auto& x) { return loss(q, x, v); }, k), 1e-6));
  EXPECT_TRUE(all_close(as_float(g.dv), test::finite_diff_grad([&](const auto& x) { return loss(q, k, x); }, v), 1e-6));
}

// The checks above fail on wrong results: a driver that forgot one key tile,
// or lost a rescale, moves values by far more than these perturbations.
// (Batch entry 0 has no keys: its rows are exact zeros; the others are
// perturbed in entry 1.)
TEST(AttentionGeneral, ComparisonsCatchWrongResults) {
  const Cfg c{2, 100, 4, 2, 16, true, MaskKind::kPadding};
  const CaseRun good = run_case(c, DType::kF32);
  ASSERT_TRUE(matches_reference(good, DType::kF32));
  const auto spoiled = [&](auto mutate) {
    CaseRun r = good;
    mutate(r);
    return matches_reference(r, DType::kF32);
  };
  EXPECT_FALSE(spoiled([](CaseRun& r) { r.out[6523] += 1e-3f; }));
  EXPECT_FALSE(spoiled([](CaseRun& r) { r.lse[777] += 1e-3f; }));
  EXPECT_FALSE(spoiled([](CaseRun& r) { r.lse[0] = 0.f; }));  // batch 0 has no keys: lse must stay -inf
  EXPECT_FALSE(spoiled([](CaseRun& r) { r.dq[4000] += 1e-2f; }));
  EXPECT_FALSE(spoiled([](CaseRun& r) { r.dk[3300] += 1e-3f; }));
  EXPECT_FALSE(spoiled([](CaseRun& r) { std::swap(r.dv[4700], r.dv[4701]); }));
  // Another seed's inputs: every output differs.
  const CaseRun other = run_case(c, DType::kF32, 8);
  CaseRun mixed = good;
  mixed.out = other.out;
  EXPECT_FALSE(matches_reference(mixed, DType::kF32));
}

#if defined(_OPENMP)
// The same bits run to run and with 1, 2 or 3 threads (fixed summation orders).
TEST(AttentionGeneral, DeterministicAcrossThreadCounts) {
  const Cfg c{2, 150, 4, 2, 16, true, MaskKind::kRandom};
  CaseRun first;
  test::with_omp_threads(1, [&] { first = run_case(c, DType::kF32); });
  for (int threads : {1, 2, 3})
    test::with_omp_threads(threads, [&] {
      const CaseRun r = run_case(c, DType::kF32);
      EXPECT_EQ(std::memcmp(r.out.data(), first.out.data(), r.out.size() * 4), 0) << threads << " threads";
      EXPECT_EQ(std::memcmp(r.lse.data(), first.lse.data(), r.lse.size() * 4), 0) << threads << " threads";
      EXPECT_EQ(std::memcmp(r.dq.data(), first.dq.data(), r.dq.size() * 4), 0) << threads << " threads";
      EXPECT_EQ(std::memcmp(r.dk.data(), first.dk.data(), r.dk.size() * 4), 0) << threads << " threads";
      EXPECT_EQ(std::memcmp(r.dv.data(), first.dv.data(), r.dv.size() * 4), 0) << threads << " threads";
    });
}
#endif

// Multi-query attention equals multi-head attention with the key/value head
// repeated, and dk, dv are the sums over the repeats (in head order).
TEST(AttentionGeneral, GroupedQueryEqualsRepeatedHeads) {
  const std::int64_t b = 2, t = 70, h = 4, kv = 2, d = 8, group = h / kv;
  std::mt19937 rng(11);
  const Tensor q = random_tensor({b, t, h * d}, rng), k = random_tensor({b, t, kv * d}, rng),
               v = random_tensor({b, t, kv * d}, rng), dout = random_tensor({b, t, h * d}, rng);
  const auto repeat = [&](const Tensor& x) {
    const auto in = x.to_vector<float>();
    std::vector<float> rep(std::size_t(b * t * h * d));
    for (std::int64_t r = 0; r < b * t; ++r)
      for (std::int64_t hh = 0; hh < h; ++hh)
        for (std::int64_t c = 0; c < d; ++c)
          rep[std::size_t(r * h * d + hh * d + c)] = in[std::size_t(r * kv * d + (hh / group) * d + c)];
    return Tensor::from_vector(rep, {b, t, h * d});
  };
  const Tensor k_rep = repeat(k), v_rep = repeat(v);
  Tensor out = Tensor::zeros(q.shape(), DType::kF32), lse = Tensor::zeros({b, h, t}, DType::kF32), out_rep = Tensor::zeros(q.shape(), DType::kF32),
         lse_rep = Tensor::zeros({b, h, t}, DType::kF32);
  attention_forward(q, k, v, {int(h), int(kv), true}, nullptr, out, lse);
  attention_forward(q, k_rep, v_rep, {int(h), int(h), true}, nullptr, out_rep, lse_rep);
  EXPECT_EQ(out.to_vector<float>(), out_rep.to_vector<float>());
  EXPECT_EQ(lse.to_vector<float>(), lse_rep.to_vector<float>());
  Tensor dq = Tensor::zeros(q.shape(), DType::kF32), dk = Tensor::zeros(k.shape(), DType::kF32), dv = Tensor::zeros(v.shape(), DType::kF32);
  Tensor dq_rep = Tensor::zeros(q.shape(), DType::kF32), dk_rep = Tensor::zeros(q.shape(), DType::kF32), dv_rep = Tensor::zeros(q.shape(), DType::kF32);
  attention_backward(dout, q, k, v, out, lse, {int(h), int(kv), true}, nullptr, dq, dk, dv);
  attention_backward(dout, q, k_rep, v_rep, out_rep, lse_rep, {int(h), int(h), true}, nullptr, dq_rep, dk_rep, dv_rep);
  EXPECT_EQ(dq.to_vector<float>(), dq_rep.to_vector<float>());
  const auto sum_groups = [&](const Tensor& x) {
    const auto in = x.to_vector<float>();
    std::vector<double> s(std::size_t(b * t * kv * d), 0.0);
    for (std::int64_t r = 0; r < b * t; ++r)
      for (std::int64_t hh = 0; hh < h; ++hh)
        for (std::int64_t c = 0; c < d; ++c)
          s[std::size_t(r * kv * d + (hh / group) * d + c)] += in[std::size_t(r * h * d + hh * d + c)];
    return s;
  };
  EXPECT_TRUE(all_close(dk.to_vector<float>(), sum_groups(dk_rep), 1e-6));
  EXPECT_TRUE(all_close(dv.to_vector<float>(), sum_groups(dv_rep), 1e-6));
}

TEST(AttentionGeneral, EmptyShapes) {
  for (const Shape& s : {Shape{0, 5, 8}, Shape{2, 0, 8}}) {
    const Tensor q = Tensor::zeros(s, DType::kF32), kv = Tensor::zeros({s[0], s[1], 4}, DType::kF32);
    Tensor out = Tensor::zeros(s, DType::kF32), lse = Tensor::zeros({s[0], 2, s[1]}, DType::kF32);
    EXPECT_NO_THROW(attention_forward(q, kv, kv, {2, 1, true}, nullptr, out, lse));
    Tensor dq = Tensor::zeros(s, DType::kF32), dk = Tensor::zeros(kv.shape(), DType::kF32), dv = Tensor::zeros(kv.shape(), DType::kF32);
    EXPECT_NO_THROW(attention_backward(out, q, kv, kv, out, lse, {2, 1, true}, nullptr, dq, dk, dv));
  }
}

TEST(AttentionGeneral, Errors) {
  auto t = [](Shape s, DType d = DType::kF32) { return Tensor::zeros(s, d); };
  const Tensor q = t({2, 5, 12}), k = t({2, 5, 6}), v = t({2, 5, 6});
  Tensor out = t({2, 5, 12}), lse = t({2, 4, 5});
  // Head counts: positive, n_kv_head dividing n_head, n_head dividing q's width.
  EXPECT_TRUE(throws_error([&] { attention_forward(q, k, v, {4, 3, true}, nullptr, out, lse); },
                           ErrorKind::kShapeMismatch, {"attention_forward", "n_kv_head=3", "n_head=4", "{1,2,4}"}));
  EXPECT_TRUE(throws_error([&] { attention_forward(q, k, v, {4, 0, true}, nullptr, out, lse); },
                           ErrorKind::kShapeMismatch, {"n_kv_head=0", "positive"}));
  EXPECT_TRUE(throws_error([&] { attention_forward(q, k, v, {}, nullptr, out, lse); }, ErrorKind::kShapeMismatch,
                           {"n_head=0"}));
  EXPECT_TRUE(throws_error([&] { attention_forward(q, k, v, {5, 1, true}, nullptr, out, lse); },
                           ErrorKind::kShapeMismatch, {"last dimension of q [2, 5, 12]", "n_head=5"}));
  // A causal offset: >= 0, and only on a causal mask.
  EXPECT_TRUE(throws_error([&] { attention_forward(q, k, v, {4, 2, true, -1}, nullptr, out, lse); },
                           ErrorKind::kInvalidArgument, {"causal_offset -1"}));
  EXPECT_TRUE(throws_error([&] { attention_forward(q, k, v, {4, 2, false, 3}, nullptr, out, lse); },
                           ErrorKind::kInvalidArgument, {"only a causal mask"}));
  // k and v: (B, T, KV * D).
  EXPECT_TRUE(throws_error([&] { attention_forward(q, t({2, 5, 9}), v, {4, 2, true}, nullptr, out, lse); },
                           ErrorKind::kShapeMismatch, {"'k' must have shape [2, 5, 6]", "n_kv_head=2", "[2, 5, 9]"}));
  EXPECT_TRUE(throws_error([&] { attention_forward(q, k, t({2, 4, 6}), {4, 2, true}, nullptr, out, lse); },
                           ErrorKind::kShapeMismatch, {"'v' must have shape [2, 5, 6]"}));
  EXPECT_TRUE(throws_error([&] { attention_forward(t({10, 12}), k, v, {4, 2, true}, nullptr, out, lse); },
                           ErrorKind::kShapeMismatch, {"'q' must be 3-d"}));
  // lse: (B, H, T), f32 whatever the compute dtype.
  Tensor lse_wrong = t({2, 2, 5}), lse_bf16 = t({2, 4, 5}, DType::kBF16);
  EXPECT_TRUE(throws_error([&] { attention_forward(q, k, v, {4, 2, true}, nullptr, out, lse_wrong); },
                           ErrorKind::kShapeMismatch, {"'lse'", "[2, 4, 5]"}));
  EXPECT_TRUE(throws_error([&] { attention_forward(q, k, v, {4, 2, true}, nullptr, out, lse_bf16); },
                           ErrorKind::kDTypeMismatch, {"'lse' must be f32", "bf16"}));
  // The key mask: i32, (B, T), on q's device.
  const Tensor mask_f = t({2, 5}), mask_shape = t({2, 4}, DType::kI32);
  EXPECT_TRUE(throws_error([&] { attention_forward(q, k, v, {4, 2, true}, &mask_f, out, lse); },
                           ErrorKind::kDTypeMismatch, {"'key_mask' must be i32", "f32"}));
  EXPECT_TRUE(throws_error([&] { attention_forward(q, k, v, {4, 2, true}, &mask_shape, out, lse); },
                           ErrorKind::kShapeMismatch, {"'key_mask' must have shape [2, 5]", "[2, 4]"}));
  const Tensor undefined;
  EXPECT_TRUE(throws_error([&] { attention_forward(q, k, v, {4, 2, true}, &undefined, out, lse); },
                           ErrorKind::kInvalidArgument, {"'key_mask' is undefined"}));
  // Dtypes: one compute dtype.
  EXPECT_TRUE(throws_error([&] { attention_forward(q, t({2, 5, 6}, DType::kBF16), v, {4, 2, true}, nullptr, out, lse); },
                           ErrorKind::kDTypeMismatch, {"'k' is bf16", "'q' is f32"}));
  // Backward shapes, masks and dtypes.
  Tensor dq = t({2, 5, 12}), dk = t({2, 5, 6}), dv = t({2, 5, 6}), dk_wrong = t({2, 5, 12});
  EXPECT_TRUE(throws_error([&] { attention_backward(out, q, k, v, out, lse, {4, 2, true}, nullptr, dq, dk_wrong, dv); },
                           ErrorKind::kShapeMismatch, {"attention_backward", "'dk'", "[2, 5, 6]"}));
  EXPECT_TRUE(throws_error([&] { attention_backward(t({2, 5, 6}), q, k, v, out, lse, {4, 2, true}, nullptr, dq, dk, dv); },
                           ErrorKind::kShapeMismatch, {"'dout'"}));
  EXPECT_TRUE(throws_error([&] { attention_backward(out, q, k, v, t({2, 5, 6}), lse, {4, 2, true}, nullptr, dq, dk, dv); },
                           ErrorKind::kShapeMismatch, {"'out'", "[2, 5, 12]"}));
  EXPECT_TRUE(throws_error([&] { attention_backward(out, q, k, v, out, lse_wrong, {4, 2, true}, nullptr, dq, dk, dv); },
                           ErrorKind::kShapeMismatch, {"attention_backward", "'lse'"}));
  EXPECT_TRUE(throws_error([&] { attention_backward(out, q, k, v, out, lse, {4, 2, true}, &mask_shape, dq, dk, dv); },
                           ErrorKind::kShapeMismatch, {"attention_backward", "'key_mask'"}));
  EXPECT_TRUE(throws_error([&] { attention_backward(out, q, k, v, out, lse, {4, 4, true}, nullptr, dq, dk, dv); },
                           ErrorKind::kShapeMismatch, {"'k' must have shape [2, 5, 12]"}));
  Tensor dv16 = t({2, 5, 6}, DType::kF16);
  EXPECT_TRUE(throws_error([&] { attention_backward(out, q, k, v, out, lse, {4, 2, true}, nullptr, dq, dk, dv16); },
                           ErrorKind::kDTypeMismatch, {"'dv' is f16"}));
}

}  // namespace
}  // namespace ht::ops::attention_general_test
