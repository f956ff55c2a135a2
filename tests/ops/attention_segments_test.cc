// Attention with segment ids (document masking: query i sees key j only of
// its own segment), packed and general, against the double-precision
// reference with the softmax materialised (attention_reference.h): documents
// of many lengths across the CPU driver's 64-wide tiles (tiles skipped whole,
// tiles mixing documents), ids that are not sorted (no tile skipped), one
// token per document, together with key masks and grouped-query heads;
// f16/bf16; one segment for the whole row gives the bits of no ids; a row of
// two documents gives each document what a row of it alone gives; the same
// bits at any thread count; argument errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <optional>

#include "attention_reference.h"
#include "half_util.h"
#include "ht/ops/attention.h"
#include "test_util.h"

namespace ht::ops::attention_segments_test {
namespace {

using test::all_close;
using test::random_tensor;
using test::throws_error;

enum class Layout {
  kDocuments,   // consecutive documents of 1 to 90 tokens (ids 0, 1, ...), drawn per row
  kLong,        // a document of 150 tokens, then one of the rest: whole tiles skipped
  kUnsorted,    // ids (7 j / 5) mod 3: every tile mixes ids, none is skipped
  kSingletons,  // every token a document of its own: a query sees itself only
  kOne,         // one document (id 4) for the whole row
};

struct Cfg {
  std::int64_t b, t, h, kv, d;
  bool causal, key_mask;
  Layout layout;
};

std::ostream& operator<<(std::ostream& os, const Cfg& c) {
  return os << "B " << c.b << " T " << c.t << " H " << c.h << " KV " << c.kv << " D " << c.d << " causal "
            << c.causal << " key mask " << c.key_mask << " layout " << int(c.layout);
}

std::vector<std::int32_t> make_segments(const Cfg& c, std::mt19937& rng) {
  std::vector<std::int32_t> ids(std::size_t(c.b * c.t));
  std::uniform_int_distribution<std::int64_t> length(1, 90);
  for (std::int64_t b = 0; b < c.b; ++b) {
    std::int32_t* row = ids.data() + b * c.t;
    std::int64_t left = 0;
    std::int32_t doc = -1;
    for (std::int64_t j = 0; j < c.t; ++j) {
      switch (c.layout) {
        case Layout::kDocuments:
          if (left == 0) left = length(rng), ++doc;
          --left;
          row[j] = doc;
          break;
        case Layout::kLong: row[j] = j < 150 ? 0 : 1; break;
        case Layout::kUnsorted: row[j] = std::int32_t(7 * j / 5 % 3); break;
        case Layout::kSingletons: row[j] = std::int32_t(j); break;
        case Layout::kOne: row[j] = 4; break;
      }
    }
  }
  return ids;
}

// Each key kept with probability 0.8 (any nonzero keeps).
std::vector<std::int32_t> make_key_mask(const Cfg& c, std::mt19937& rng) {
  if (!c.key_mask) return {};
  std::vector<std::int32_t> m(std::size_t(c.b * c.t));
  std::bernoulli_distribution keep(0.8);
  for (auto& x : m) x = keep(rng) ? 1 : 0;
  return m;
}

struct SegRun {
  test::AttentionRef ref;
  test::AttentionRefGrads ref_grads;
  std::vector<float> out, lse, dq, dk, dv;
};

Tensor rounded(const Tensor& t, DType dtype) { return dtype == DType::kF32 ? t : test::cast_to(t, dtype); }
Tensor widened(const Tensor& t) { return t.dtype() == DType::kF32 ? t : test::cast_to(t, DType::kF32); }

// One case through the general form (or, with `packed`, through a packed
// qkv built from the same q, k, v: needs H == KV and causal), and the
// reference on the same values.
SegRun run_case(const Cfg& c, DType dtype, bool packed = false, std::uint32_t seed = 5) {
  std::mt19937 rng(seed);
  const Tensor q = rounded(random_tensor({c.b, c.t, c.h * c.d}, rng, -2.f, 2.f), dtype);
  const Tensor k = rounded(random_tensor({c.b, c.t, c.kv * c.d}, rng, -2.f, 2.f), dtype);
  const Tensor v = rounded(random_tensor({c.b, c.t, c.kv * c.d}, rng), dtype);
  const Tensor dout = rounded(random_tensor({c.b, c.t, c.h * c.d}, rng), dtype);
  const std::vector<std::int32_t> segments = make_segments(c, rng), mask = make_key_mask(c, rng);
  const Tensor ids = Tensor::from_vector(segments, {c.b, c.t});
  const std::optional<Tensor> mask_t =
      mask.empty() ? std::nullopt : std::optional<Tensor>(Tensor::from_vector(mask, {c.b, c.t}));
  Tensor out = test::nan_tensor(q.shape()), lse = test::nan_tensor({c.b, c.h, c.t});
  out = rounded(out, dtype);
  SegRun r;
  if (packed) {
    const std::int64_t w = c.h * c.d;
    Tensor qkv = Tensor::empty({c.b, c.t, 3 * w}, dtype);
    for (std::int64_t row = 0; row < c.b * c.t; ++row) {
      const std::size_t es = dtype_size(dtype);
      auto* dst = static_cast<char*>(qkv.data_ptr()) + row * 3 * w * std::int64_t(es);
      std::memcpy(dst, static_cast<const char*>(q.data_ptr()) + row * w * std::int64_t(es), std::size_t(w) * es);
      std::memcpy(dst + w * std::int64_t(es), static_cast<const char*>(k.data_ptr()) + row * w * std::int64_t(es),
                  std::size_t(w) * es);
      std::memcpy(dst + 2 * w * std::int64_t(es), static_cast<const char*>(v.data_ptr()) + row * w * std::int64_t(es),
                  std::size_t(w) * es);
    }
    attention_forward(qkv, int(c.h), &ids, out, lse);
    Tensor dqkv = rounded(test::nan_tensor(qkv.shape()), dtype);
    attention_backward(dout, qkv, out, lse, int(c.h), &ids, dqkv);
    const std::vector<float> g = widened(dqkv).to_vector<float>();
    for (std::int64_t row = 0; row < c.b * c.t; ++row)
      for (std::int64_t x = 0; x < w; ++x) {
        r.dq.push_back(g[std::size_t(row * 3 * w + x)]);
        r.dk.push_back(g[std::size_t(row * 3 * w + w + x)]);
        r.dv.push_back(g[std::size_t(row * 3 * w + 2 * w + x)]);
      }
  } else {
    const AttentionOptions o{int(c.h), int(c.kv), c.causal};
    const Tensor* m = mask_t ? &*mask_t : nullptr;
    attention_forward(q, k, v, o, m, &ids, out, lse);
    Tensor dq = rounded(test::nan_tensor(q.shape()), dtype), dk = rounded(test::nan_tensor(k.shape()), dtype),
           dv = rounded(test::nan_tensor(v.shape()), dtype);
    attention_backward(dout, q, k, v, out, lse, o, m, &ids, dq, dk, dv);
    r.dq = widened(dq).to_vector<float>();
    r.dk = widened(dk).to_vector<float>();
    r.dv = widened(dv).to_vector<float>();
  }
  r.out = widened(out).to_vector<float>();
  r.lse = lse.to_vector<float>();
  const test::AttentionRefShape s{c.b, c.t, c.h, c.kv, c.d, c.causal};
  const auto qd = test::to_double(widened(q)), kd = test::to_double(widened(k)), vd = test::to_double(widened(v));
  r.ref = test::attention_reference(s, qd, kd, vd, mask, segments);
  r.ref_grads = test::attention_reference_backward(s, qd, kd, vd, r.ref, test::to_double(widened(dout)));
  return r;
}

// As attention_general_test's: lse -inf exactly where the reference has a
// row without keys; gradients against the case's largest one as the
// absolute scale (terms that cancel leave rounding noise).
::testing::AssertionResult matches_reference(const SegRun& r, DType dtype) {
  const bool f32 = dtype == DType::kF32;
  const double out_tol = f32 ? 2e-5 : test::half_rtol(dtype), grad_tol = f32 ? 5e-5 : 2 * test::half_rtol(dtype);
  if (auto a = all_close(r.out, r.ref.out, out_tol); !a) return a << " (out)";
  std::vector<float> lse;
  std::vector<double> want;
  for (std::size_t i = 0; i < r.lse.size(); ++i) {
    if (std::isinf(r.ref.lse[i])) {
      if (r.lse[i] != -INFINITY)
        return ::testing::AssertionFailure() << "lse row " << i << ": got " << r.lse[i] << ", want -inf";
      continue;
    }
    lse.push_back(r.lse[i]);
    want.push_back(r.ref.lse[i]);
  }
  if (auto a = all_close(lse, want, 2e-6); !a) return a << " (lse)";
  double scale = 0;
  for (const auto* g : {&r.ref_grads.dq, &r.ref_grads.dk, &r.ref_grads.dv})
    for (double v : *g) scale = std::max(scale, std::abs(v));
  if (auto a = all_close(r.dq, r.ref_grads.dq, grad_tol, grad_tol * scale); !a) return a << " (dq)";
  if (auto a = all_close(r.dk, r.ref_grads.dk, grad_tol, grad_tol * scale); !a) return a << " (dk)";
  if (auto a = all_close(r.dv, r.ref_grads.dv, grad_tol, grad_tol * scale); !a) return a << " (dv)";
  return ::testing::AssertionSuccess();
}

const Cfg kGeneral[] = {
    {2, 1, 2, 1, 8, true, false, Layout::kDocuments},    {2, 5, 4, 2, 8, false, false, Layout::kSingletons},
    {2, 100, 4, 2, 16, true, false, Layout::kDocuments}, {2, 100, 4, 1, 8, false, true, Layout::kDocuments},
    {1, 200, 2, 2, 8, true, false, Layout::kLong},       {1, 200, 2, 1, 8, false, false, Layout::kLong},
    {2, 130, 4, 2, 8, true, true, Layout::kUnsorted},    {2, 70, 2, 2, 12, false, false, Layout::kUnsorted},
    {2, 66, 2, 1, 8, true, true, Layout::kSingletons},   {3, 257, 2, 1, 5, true, false, Layout::kDocuments},
};

TEST(AttentionSegments, GeneralMatchesReference) {
  for (const Cfg& c : kGeneral) {
    SCOPED_TRACE(::testing::Message() << c);
    EXPECT_TRUE(matches_reference(run_case(c, DType::kF32), DType::kF32));
  }
}

TEST(AttentionSegments, PackedMatchesReference) {
  const Cfg cases[] = {{2, 7, 2, 2, 6, true, false, Layout::kSingletons},
                       {2, 100, 4, 4, 8, true, false, Layout::kDocuments},
                       {1, 200, 2, 2, 16, true, false, Layout::kLong},
                       {2, 130, 3, 3, 8, true, false, Layout::kUnsorted},
                       {2, 300, 2, 2, 8, true, false, Layout::kDocuments}};
  for (const Cfg& c : cases) {
    SCOPED_TRACE(::testing::Message() << c);
    EXPECT_TRUE(matches_reference(run_case(c, DType::kF32, /*packed=*/true), DType::kF32));
  }
}

TEST(AttentionSegments, HalfDtypesMatchReference) {
  for (const DType dt : test::kHalfDtypes)
    for (const Cfg& c : {Cfg{2, 100, 4, 2, 16, true, true, Layout::kDocuments}, Cfg{1, 130, 2, 2, 8, true, false, Layout::kLong}}) {
      SCOPED_TRACE(::testing::Message() << c << " " << dtype_name(dt));
      EXPECT_TRUE(matches_reference(run_case(c, dt), dt));
      EXPECT_TRUE(matches_reference(run_case({c.b, c.t, c.h, c.h, c.d, true, false, c.layout}, dt, true), dt));
    }
}

// The comparisons see a mask that leaks: the reference without segment ids
// differs from the op with them by far more than the tolerance.
TEST(AttentionSegments, ComparisonsCatchALeak) {
  SegRun r = run_case({2, 100, 4, 2, 16, true, false, Layout::kDocuments}, DType::kF32);
  ASSERT_TRUE(matches_reference(r, DType::kF32));
  std::mt19937 rng(5);
  const Tensor q = random_tensor({2, 100, 64}, rng, -2.f, 2.f), k = random_tensor({2, 100, 32}, rng, -2.f, 2.f),
               v = random_tensor({2, 100, 32}, rng);
  r.ref = test::attention_reference({2, 100, 4, 2, 16, true}, test::to_double(q), test::to_double(k),
                                    test::to_double(v), {});
  EXPECT_FALSE(all_close(r.out, r.ref.out, 2e-5));
}

// One id for the whole row runs exactly as no ids: the same bits.
TEST(AttentionSegments, OneSegmentIsNoSegments) {
  const std::int64_t b = 2, t = 150, h = 4, kv = 2, d = 8;
  std::mt19937 rng(3);
  const Tensor q = random_tensor({b, t, h * d}, rng), k = random_tensor({b, t, kv * d}, rng),
               v = random_tensor({b, t, kv * d}, rng), dout = random_tensor({b, t, h * d}, rng);
  const Tensor ids = Tensor::from_vector(std::vector<std::int32_t>(std::size_t(b * t), 7), {b, t});
  const auto run = [&](const Tensor* segs) {
    Tensor out = Tensor::zeros(q.shape(), DType::kF32), lse = Tensor::zeros({b, h, t}, DType::kF32);
    Tensor dq = Tensor::zeros(q.shape(), DType::kF32), dk = Tensor::zeros(k.shape(), DType::kF32),
           dv = Tensor::zeros(v.shape(), DType::kF32);
    attention_forward(q, k, v, {int(h), int(kv), true}, nullptr, segs, out, lse);
    attention_backward(dout, q, k, v, out, lse, {int(h), int(kv), true}, nullptr, segs, dq, dk, dv);
    return std::vector<std::vector<float>>{out.to_vector<float>(), lse.to_vector<float>(), dq.to_vector<float>(),
                                           dk.to_vector<float>(), dv.to_vector<float>()};
  };
  EXPECT_EQ(run(&ids), run(nullptr));
}

// A packed row of two documents, A (70 tokens: across a tile boundary) then
// B (90), gives A's positions what a row of A alone gives and B's what a row
// of B alone gives, gradients included (the tiles fall elsewhere, so the
// sums round differently: within f32 rounding).
TEST(AttentionSegments, TwoDocumentsEqualTheirOwnRows) {
  const std::int64_t c = 16, h = 2, la = 70, lb = 90, t = la + lb;
  std::mt19937 rng(21);
  const Tensor qkv = random_tensor({1, t, 3 * c}, rng, -2.f, 2.f), dout = random_tensor({1, t, c}, rng);
  std::vector<std::int32_t> docs(std::size_t(t), 0);
  std::fill(docs.begin() + la, docs.end(), 1);
  const Tensor ids = Tensor::from_vector(docs, {1, t});
  const auto run = [&](const Tensor& x, const Tensor& dy, const Tensor* segs) {
    const std::int64_t n = x.size(1);
    Tensor out = Tensor::zeros({1, n, c}, DType::kF32), lse = Tensor::zeros({1, h, n}, DType::kF32),
           dx = Tensor::zeros(x.shape(), DType::kF32);
    attention_forward(x, int(h), segs, out, lse);
    attention_backward(dy, x, out, lse, int(h), segs, dx);
    return std::pair{out.to_vector<float>(), dx.to_vector<float>()};
  };
  const auto rows = [](const Tensor& x, std::int64_t from, std::int64_t n) {
    const std::int64_t w = x.size(2);
    const auto all = x.to_vector<float>();
    return Tensor::from_vector(std::vector<float>(all.begin() + from * w, all.begin() + (from + n) * w), {1, n, w});
  };
  const auto [out, dqkv] = run(qkv, dout, &ids);
  for (const auto& [from, n] : {std::pair{std::int64_t(0), la}, std::pair{la, lb}}) {
    SCOPED_TRACE(::testing::Message() << "document at " << from);
    const auto [alone_out, alone_dx] = run(rows(qkv, from, n), rows(dout, from, n), nullptr);
    const std::vector<float> got_out(out.begin() + from * c, out.begin() + (from + n) * c);
    const std::vector<float> got_dx(dqkv.begin() + from * 3 * c, dqkv.begin() + (from + n) * 3 * c);
    EXPECT_TRUE(all_close(got_out, test::to_double(alone_out), 1e-5));
    EXPECT_TRUE(all_close(got_dx, test::to_double(alone_dx), 1e-5, 1e-6));
  }
  // Without the ids B's positions see A: they differ.
  const auto [leaky, unused] = run(qkv, dout, nullptr);
  EXPECT_NE(std::vector<float>(leaky.begin() + la * c, leaky.end()), std::vector<float>(out.begin() + la * c, out.end()));
}

#if defined(_OPENMP)
TEST(AttentionSegments, DeterministicAcrossThreadCounts) {
  const Cfg c{2, 150, 4, 2, 16, true, true, Layout::kDocuments};
  SegRun first;
  test::with_omp_threads(1, [&] { first = run_case(c, DType::kF32); });
  for (int threads : {2, 3})
    test::with_omp_threads(threads, [&] {
      const SegRun r = run_case(c, DType::kF32);
      EXPECT_EQ(r.out, first.out) << threads << " threads";
      EXPECT_EQ(r.lse, first.lse) << threads << " threads";
      EXPECT_EQ(r.dq, first.dq) << threads << " threads";
      EXPECT_EQ(r.dk, first.dk) << threads << " threads";
      EXPECT_EQ(r.dv, first.dv) << threads << " threads";
    });
}
#endif

TEST(AttentionSegments, Errors) {
  auto t = [](Shape s, DType d = DType::kF32) { return Tensor::zeros(s, d); };
  const Tensor q = t({2, 5, 12}), k = t({2, 5, 6}), v = t({2, 5, 6});
  Tensor out = t({2, 5, 12}), lse = t({2, 4, 5});
  const Tensor ids_f = t({2, 5}), ids_shape = t({2, 4}, DType::kI32), undefined;
  EXPECT_TRUE(throws_error([&] { attention_forward(q, k, v, {4, 2, true}, nullptr, &ids_f, out, lse); },
                           ErrorKind::kDTypeMismatch, {"attention_forward", "'segment_ids' must be i32", "f32"}));
  EXPECT_TRUE(throws_error([&] { attention_forward(q, k, v, {4, 2, true}, nullptr, &ids_shape, out, lse); },
                           ErrorKind::kShapeMismatch, {"'segment_ids' must have shape [2, 5]", "[2, 4]"}));
  EXPECT_TRUE(throws_error([&] { attention_forward(q, k, v, {4, 2, true}, nullptr, &undefined, out, lse); },
                           ErrorKind::kInvalidArgument, {"'segment_ids' is undefined"}));
  // Cross-attention (keys of their own length) takes no segment ids.
  const Tensor k7 = t({2, 7, 6}), v7 = t({2, 7, 6}), ids7 = t({2, 7}, DType::kI32);
  EXPECT_TRUE(throws_error([&] { attention_forward(q, k7, v7, {4, 2, false}, nullptr, &ids7, out, lse); },
                           ErrorKind::kShapeMismatch, {"segment ids", "5 queries and 7 keys", "cross-attention"}));
  Tensor dq = t({2, 5, 12}), dk = t({2, 5, 6}), dv = t({2, 5, 6});
  EXPECT_TRUE(throws_error([&] { attention_backward(out, q, k, v, out, lse, {4, 2, true}, nullptr, &ids_shape, dq, dk, dv); },
                           ErrorKind::kShapeMismatch, {"attention_backward", "'segment_ids'"}));
  // Packed: (B, T) i32.
  const Tensor qkv = t({2, 5, 36});
  EXPECT_TRUE(throws_error([&] { attention_forward(qkv, 4, &ids_shape, out, lse); }, ErrorKind::kShapeMismatch,
                           {"attention_forward", "'segment_ids' must have shape [2, 5]"}));
  Tensor dqkv = t({2, 5, 36});
  EXPECT_TRUE(throws_error([&] { attention_backward(out, qkv, out, lse, 4, &ids_f, dqkv); }, ErrorKind::kDTypeMismatch,
                           {"attention_backward", "'segment_ids' must be i32"}));
}

}  // namespace
}  // namespace ht::ops::attention_segments_test
