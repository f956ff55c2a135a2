// General attention (separate q, k, v; grouped-query heads; causal or not;
// key padding mask) against a double-precision reference written from the
// definition: forward, backward by finite differences and by the analytic
// reference (long causal sequences, which the CPU driver takes in blocks),
// rows with no admissible key, agreement with the packed op, determinism
// across thread counts, 16-bit dtypes and argument errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <optional>

#include "half_util.h"
#include "ht/ops/attention.h"
#include "test_util.h"

namespace ht::ops {
namespace {

using test::all_close;
using test::finite_diff_grad;
using test::random_tensor;
using test::throws_error;

// How the key mask of a case is built.
enum class MaskKind {
  kNone,
  kRandom,   // each key kept with probability 0.6; key 0 masked in every batch entry
  kPadding,  // batch entry b keeps keys [0, len_b) with len_0 = 0 (fully masked) and len_b = t - b otherwise
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

std::optional<Tensor> make_mask(const Cfg& c, std::mt19937& rng) {
  if (c.mask == MaskKind::kNone) return std::nullopt;
  std::vector<std::int32_t> m(std::size_t(c.b * c.t));
  std::bernoulli_distribution keep(0.6);
  for (std::int64_t b = 0; b < c.b; ++b)
    for (std::int64_t j = 0; j < c.t; ++j) {
      std::int32_t v;
      if (c.mask == MaskKind::kRandom)
        v = j == 0 ? 0 : (keep(rng) ? 1 + std::int32_t(j % 3) : 0);  // any nonzero value keeps a key
      else
        v = b > 0 && j < c.t - b ? 1 : 0;
      m[std::size_t(b * c.t + j)] = v;
    }
  return Tensor::from_vector(m, {c.b, c.t});
}

struct Ref {
  std::vector<double> out, probs;
};

// out (B, T, H*D) and probs (B, H, T, T) from the definition.
Ref attention_ref(const Cfg& c, const std::vector<double>& q, const std::vector<double>& k,
                  const std::vector<double>& v, const std::vector<std::int32_t>& mask) {
  const std::int64_t group = c.h / c.kv, wq = c.h * c.d, wk = c.kv * c.d;
  Ref r{std::vector<double>(std::size_t(c.b * c.t * wq), 0.0), std::vector<double>(std::size_t(c.b * c.h * c.t * c.t), 0.0)};
  const double scale = 1.0 / std::sqrt(double(c.d));
  for (std::int64_t b = 0; b < c.b; ++b)
    for (std::int64_t h = 0; h < c.h; ++h)
      for (std::int64_t i = 0; i < c.t; ++i) {
        const std::int64_t g = h / group;
        std::vector<double> s(std::size_t(c.t), -INFINITY);
        double mx = -INFINITY;
        for (std::int64_t j = 0; j < c.t; ++j) {
          if ((c.causal && j > i) || (!mask.empty() && mask[std::size_t(b * c.t + j)] == 0)) continue;
          double dot = 0;
          for (std::int64_t e = 0; e < c.d; ++e)
            dot += q[std::size_t((b * c.t + i) * wq + h * c.d + e)] * k[std::size_t((b * c.t + j) * wk + g * c.d + e)];
          s[std::size_t(j)] = dot * scale;
          mx = std::max(mx, s[std::size_t(j)]);
        }
        if (mx == -INFINITY) continue;  // no admissible key: zeros
        double sum = 0;
        for (double& x : s) sum += (x = std::isinf(x) ? 0.0 : std::exp(x - mx));
        double* p = r.probs.data() + ((b * c.h + h) * c.t + i) * c.t;
        for (std::int64_t j = 0; j < c.t; ++j) p[j] = s[std::size_t(j)] / sum;
        for (std::int64_t e = 0; e < c.d; ++e) {
          double o = 0;
          for (std::int64_t j = 0; j < c.t; ++j) o += p[j] * v[std::size_t((b * c.t + j) * wk + g * c.d + e)];
          r.out[std::size_t((b * c.t + i) * wq + h * c.d + e)] = o;
        }
      }
  return r;
}

struct RefGrad {
  std::vector<double> dq, dk, dv;
};

// The analytic backward from the reference probs: dP = dO V^T, dS = P (dP -
// rowsum(P dP)) scale, dQ = dS K, dK = dS^T Q, dV = P^T dO, summed over the
// query heads of each key/value head.
RefGrad attention_ref_backward(const Cfg& c, const std::vector<double>& q, const std::vector<double>& k,
                               const std::vector<double>& v, const std::vector<double>& probs,
                               const std::vector<double>& dout) {
  const std::int64_t group = c.h / c.kv, wq = c.h * c.d, wk = c.kv * c.d;
  RefGrad r{std::vector<double>(q.size(), 0.0), std::vector<double>(k.size(), 0.0), std::vector<double>(v.size(), 0.0)};
  const double scale = 1.0 / std::sqrt(double(c.d));
  for (std::int64_t b = 0; b < c.b; ++b)
    for (std::int64_t h = 0; h < c.h; ++h) {
      const std::int64_t g = h / group;
      auto qa = [&](std::int64_t i, std::int64_t e) { return std::size_t((b * c.t + i) * wq + h * c.d + e); };
      auto ka = [&](std::int64_t j, std::int64_t e) { return std::size_t((b * c.t + j) * wk + g * c.d + e); };
      for (std::int64_t i = 0; i < c.t; ++i) {
        const double* p = probs.data() + ((b * c.h + h) * c.t + i) * c.t;
        std::vector<double> dp(std::size_t(c.t));
        double dot = 0;
        for (std::int64_t j = 0; j < c.t; ++j) {
          double x = 0;
          for (std::int64_t e = 0; e < c.d; ++e) x += dout[qa(i, e)] * v[ka(j, e)];
          dp[std::size_t(j)] = x;
          dot += p[j] * x;
        }
        for (std::int64_t j = 0; j < c.t; ++j) {
          const double ds = p[j] * (dp[std::size_t(j)] - dot) * scale;
          for (std::int64_t e = 0; e < c.d; ++e) {
            r.dq[qa(i, e)] += ds * k[ka(j, e)];
            r.dk[ka(j, e)] += ds * q[qa(i, e)];
            r.dv[ka(j, e)] += p[j] * dout[qa(i, e)];
          }
        }
      }
    }
  return r;
}

struct Forward {
  Tensor q, k, v, out, probs;
  std::optional<Tensor> mask;
};

Forward forward(const Cfg& c, std::mt19937& rng, float range = 1.f) {
  Forward r{random_tensor({c.b, c.t, c.h * c.d}, rng, -range, range), random_tensor({c.b, c.t, c.kv * c.d}, rng, -range, range),
        random_tensor({c.b, c.t, c.kv * c.d}, rng, -range, range), test::nan_tensor({c.b, c.t, c.h * c.d}),
        test::nan_tensor({c.b, c.h, c.t, c.t}), make_mask(c, rng)};
  attention_forward(r.q, r.k, r.v, {int(c.h), int(c.kv), c.causal}, r.mask ? &*r.mask : nullptr, r.out, r.probs);
  return r;
}

std::vector<std::int32_t> mask_values(const Forward& r) {
  return r.mask ? r.mask->to_vector<std::int32_t>() : std::vector<std::int32_t>();
}

// Awkward sizes: T = 1, primes, H == KV, KV == 1, D = 1, every mask kind, causal or not.
const Cfg kCfgs[] = {
    {1, 1, 1, 1, 4, true, MaskKind::kNone},     {1, 1, 2, 1, 3, false, MaskKind::kNone},
    {2, 5, 4, 2, 3, true, MaskKind::kNone},     {2, 5, 4, 2, 3, false, MaskKind::kNone},
    {1, 7, 3, 3, 2, true, MaskKind::kRandom},   {2, 7, 6, 1, 2, false, MaskKind::kRandom},
    {3, 4, 2, 2, 1, true, MaskKind::kPadding},  {3, 6, 4, 1, 3, false, MaskKind::kPadding},
    {2, 3, 6, 3, 5, true, MaskKind::kRandom},   {1, 11, 2, 1, 3, false, MaskKind::kNone},
};

TEST(AttentionGeneral, ForwardMatchesDoubleReference) {
  std::mt19937 rng(41);
  for (const Cfg& c : kCfgs)
    for (float range : {1.f, 4.f}) {  // 4: peaked softmax rows
      SCOPED_TRACE(::testing::Message() << c << " range " << range);
      const Forward r = forward(c, rng, range);
      const Ref want = attention_ref(c, test::to_double(r.q), test::to_double(r.k), test::to_double(r.v), mask_values(r));
      EXPECT_TRUE(all_close(r.out.to_vector<float>(), want.out, 1e-5));
      EXPECT_TRUE(all_close(r.probs.to_vector<float>(), want.probs, 1e-5));
      // Masked probabilities are exactly zero; rows sum to 1, or are all zero when no key is admissible.
      const auto p = r.probs.to_vector<float>();
      for (std::size_t i = 0; i < p.size(); ++i)
        if (want.probs[i] == 0.0) ASSERT_EQ(p[i], 0.f) << "probs element " << i;
    }
}

TEST(AttentionGeneral, RowsWithoutAdmissibleKeysAreZeroWithZeroGradient) {
  // Padding: batch entry 0 has no key at all; with a causal mask and key 0
  // masked, query 0 of every entry has none either.
  std::mt19937 rng(42);
  for (const Cfg& c : {Cfg{3, 5, 4, 2, 3, true, MaskKind::kPadding}, Cfg{2, 6, 2, 1, 4, true, MaskKind::kRandom}}) {
    SCOPED_TRACE(::testing::Message() << c);
    const Forward r = forward(c, rng);
    const auto mask = mask_values(r);
    Tensor dout = random_tensor(r.out.shape(), rng);
    Tensor dq = test::nan_tensor(r.q.shape()), dk = test::nan_tensor(r.k.shape()), dv = test::nan_tensor(r.v.shape());
    attention_backward(dout, r.q, r.k, r.v, r.probs, {int(c.h), int(c.kv), c.causal}, dq, dk, dv);
    const auto out = r.out.to_vector<float>(), vdq = dq.to_vector<float>(), vdk = dk.to_vector<float>(),
               vdv = dv.to_vector<float>();
    int empty_rows = 0;
    for (std::int64_t b = 0; b < c.b; ++b)
      for (std::int64_t i = 0; i < c.t; ++i) {
        bool any = false;
        for (std::int64_t j = 0; j <= i; ++j) any = any || mask[std::size_t(b * c.t + j)] != 0;
        if (any) continue;
        ++empty_rows;
        for (std::int64_t e = 0; e < c.h * c.d; ++e) {
          const std::size_t at = std::size_t((b * c.t + i) * c.h * c.d + e);
          ASSERT_EQ(out[at], 0.f) << "b " << b << " i " << i;
          ASSERT_EQ(vdq[at], 0.f) << "b " << b << " i " << i;
        }
      }
    EXPECT_GT(empty_rows, 0);
    // Masked keys get exactly zero dk and dv.
    for (std::int64_t b = 0; b < c.b; ++b)
      for (std::int64_t j = 0; j < c.t; ++j)
        if (mask[std::size_t(b * c.t + j)] == 0)
          for (std::int64_t e = 0; e < c.kv * c.d; ++e) {
            const std::size_t at = std::size_t((b * c.t + j) * c.kv * c.d + e);
            ASSERT_EQ(vdk[at], 0.f);
            ASSERT_EQ(vdv[at], 0.f);
          }
  }
}

TEST(AttentionGeneral, BackwardMatchesFiniteDifferences) {
  std::mt19937 rng(43);
  for (const Cfg& c : kCfgs) {
    if (c.b * c.t * (c.h + 2 * c.kv) * c.d > 200) continue;  // finite differences cost O(n^2)
    SCOPED_TRACE(::testing::Message() << c);
    const Forward r = forward(c, rng, 1.5f);
    const auto mask = mask_values(r);
    Tensor w = random_tensor(r.out.shape(), rng);  // L = sum w * out
    Tensor dq = test::nan_tensor(r.q.shape()), dk = test::nan_tensor(r.k.shape()), dv = test::nan_tensor(r.v.shape());
    attention_backward(w, r.q, r.k, r.v, r.probs, {int(c.h), int(c.kv), c.causal}, dq, dk, dv);
    const auto vw = test::to_double(w), vq = test::to_double(r.q), vk = test::to_double(r.k), vv = test::to_double(r.v);
    auto loss = [&](const std::vector<double>& q, const std::vector<double>& k, const std::vector<double>& v) {
      const Ref o = attention_ref(c, q, k, v, mask);
      double l = 0;
      for (std::size_t i = 0; i < o.out.size(); ++i) l += vw[i] * o.out[i];
      return l;
    };
    EXPECT_TRUE(all_close(dq.to_vector<float>(), finite_diff_grad([&](const auto& x) { return loss(x, vk, vv); }, vq),
                          1e-4, 1e-7))
        << "dq";
    EXPECT_TRUE(all_close(dk.to_vector<float>(), finite_diff_grad([&](const auto& x) { return loss(vq, x, vv); }, vk),
                          1e-4, 1e-7))
        << "dk";
    EXPECT_TRUE(all_close(dv.to_vector<float>(), finite_diff_grad([&](const auto& x) { return loss(vq, vk, x); }, vv),
                          1e-4, 1e-7))
        << "dv";
  }
}

TEST(AttentionGeneral, LongSequencesMatchTheAnalyticReference) {
  // T past the CPU driver's causal block (64 query rows), and not a multiple of it.
  std::mt19937 rng(44);
  for (const Cfg& c : {Cfg{1, 150, 2, 1, 4, true, MaskKind::kNone}, Cfg{2, 67, 4, 2, 3, true, MaskKind::kRandom},
                       Cfg{1, 129, 2, 2, 5, false, MaskKind::kPadding}, Cfg{2, 64, 2, 1, 2, true, MaskKind::kNone},
                       Cfg{1, 65, 3, 3, 2, true, MaskKind::kPadding}}) {
    SCOPED_TRACE(::testing::Message() << c);
    const Forward r = forward(c, rng, 1.5f);
    const auto vq = test::to_double(r.q), vk = test::to_double(r.k), vv = test::to_double(r.v);
    const Ref want = attention_ref(c, vq, vk, vv, mask_values(r));
    EXPECT_TRUE(all_close(r.out.to_vector<float>(), want.out, 1e-5));
    EXPECT_TRUE(all_close(r.probs.to_vector<float>(), want.probs, 1e-5));
    Tensor dout = random_tensor(r.out.shape(), rng);
    Tensor dq = test::nan_tensor(r.q.shape()), dk = test::nan_tensor(r.k.shape()), dv = test::nan_tensor(r.v.shape());
    attention_backward(dout, r.q, r.k, r.v, r.probs, {int(c.h), int(c.kv), c.causal}, dq, dk, dv);
    const RefGrad g = attention_ref_backward(c, vq, vk, vv, want.probs, test::to_double(dout));
    EXPECT_TRUE(all_close(dq.to_vector<float>(), g.dq, 1e-4)) << "dq";
    EXPECT_TRUE(all_close(dk.to_vector<float>(), g.dk, 1e-4)) << "dk";
    EXPECT_TRUE(all_close(dv.to_vector<float>(), g.dv, 1e-4)) << "dv";
  }
}

// The columns [c0, c0 + width) of a (B, T, W) tensor, as a new (B, T, width) tensor.
Tensor columns(const Tensor& x, std::int64_t c0, std::int64_t width) {
  const std::int64_t rows = x.size(0) * x.size(1), w = x.size(2);
  const auto v = x.to_vector<float>();
  std::vector<float> out(std::size_t(rows * width));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t j = 0; j < width; ++j) out[std::size_t(r * width + j)] = v[std::size_t(r * w + c0 + j)];
  return Tensor::from_vector(out, {x.size(0), x.size(1), width});
}

TEST(AttentionGeneral, EqualsThePackedOpBitForBit) {
  // Causal, H == KV, no mask: the same driver body on the same values.
  std::mt19937 rng(45);
  for (auto [b, t, c, h] : {std::tuple<std::int64_t, std::int64_t, std::int64_t, int>{1, 1, 4, 1}, {2, 13, 12, 3},
                            {2, 70, 16, 2}, {1, 130, 8, 4}}) {
    SCOPED_TRACE(::testing::Message() << "B " << b << " T " << t << " C " << c << " H " << h);
    const Tensor qkv = random_tensor({b, t, 3 * c}, rng, -2.f, 2.f), dout = random_tensor({b, t, c}, rng);
    Tensor out = Tensor::empty({b, t, c}, DType::kF32), probs = Tensor::empty({b, h, t, t}, DType::kF32);
    attention_forward(qkv, h, out, probs);
    Tensor dqkv = Tensor::empty({b, t, 3 * c}, DType::kF32);
    attention_backward(dout, qkv, probs, h, dqkv);

    const Tensor q = columns(qkv, 0, c), k = columns(qkv, c, c), v = columns(qkv, 2 * c, c);
    Tensor out2 = test::nan_tensor({b, t, c}), probs2 = test::nan_tensor({b, h, t, t});
    attention_forward(q, k, v, {h, h, true}, nullptr, out2, probs2);
    EXPECT_EQ(out2.to_vector<float>(), out.to_vector<float>());
    EXPECT_EQ(probs2.to_vector<float>(), probs.to_vector<float>());
    Tensor dq = test::nan_tensor(q.shape()), dk = test::nan_tensor(k.shape()), dv = test::nan_tensor(v.shape());
    attention_backward(dout, q, k, v, probs2, {h, h, true}, dq, dk, dv);
    EXPECT_EQ(dq.to_vector<float>(), columns(dqkv, 0, c).to_vector<float>());
    EXPECT_EQ(dk.to_vector<float>(), columns(dqkv, c, c).to_vector<float>());
    EXPECT_EQ(dv.to_vector<float>(), columns(dqkv, 2 * c, c).to_vector<float>());
  }
}

TEST(AttentionGeneral, GroupedHeadsEqualRepeatedKeyValueHeads) {
  // GQA with KV heads equals multi-head attention whose key/value heads are
  // repeated for each query head of the group: the same forward bits, and
  // dk, dv the group sums of the repeated heads' gradients.
  std::mt19937 rng(46);
  const std::int64_t b = 2, t = 9, h = 6, kv = 2, d = 3, group = h / kv;
  const Tensor q = random_tensor({b, t, h * d}, rng), k = random_tensor({b, t, kv * d}, rng),
               v = random_tensor({b, t, kv * d}, rng), dout = random_tensor({b, t, h * d}, rng);
  auto repeat = [&](const Tensor& x) {
    const auto src = x.to_vector<float>();
    std::vector<float> out(std::size_t(b * t * h * d));
    for (std::int64_t r = 0; r < b * t; ++r)
      for (std::int64_t hh = 0; hh < h; ++hh)
        for (std::int64_t e = 0; e < d; ++e)
          out[std::size_t((r * h + hh) * d + e)] = src[std::size_t((r * kv + hh / group) * d + e)];
    return Tensor::from_vector(out, {b, t, h * d});
  };
  const Tensor k_rep = repeat(k), v_rep = repeat(v);
  Tensor out = Tensor::empty({b, t, h * d}, DType::kF32), probs = Tensor::empty({b, h, t, t}, DType::kF32);
  Tensor out_rep = Tensor::empty({b, t, h * d}, DType::kF32), probs_rep = Tensor::empty({b, h, t, t}, DType::kF32);
  attention_forward(q, k, v, {int(h), int(kv), true}, nullptr, out, probs);
  attention_forward(q, k_rep, v_rep, {int(h), int(h), true}, nullptr, out_rep, probs_rep);
  EXPECT_EQ(out.to_vector<float>(), out_rep.to_vector<float>());
  EXPECT_EQ(probs.to_vector<float>(), probs_rep.to_vector<float>());
  Tensor dq = Tensor::empty(q.shape(), DType::kF32), dk = Tensor::empty(k.shape(), DType::kF32),
         dv = Tensor::empty(v.shape(), DType::kF32);
  Tensor dq_rep = Tensor::empty(q.shape(), DType::kF32), dk_rep = Tensor::empty(q.shape(), DType::kF32),
         dv_rep = Tensor::empty(q.shape(), DType::kF32);
  attention_backward(dout, q, k, v, probs, {int(h), int(kv), true}, dq, dk, dv);
  attention_backward(dout, q, k_rep, v_rep, probs_rep, {int(h), int(h), true}, dq_rep, dk_rep, dv_rep);
  EXPECT_EQ(dq.to_vector<float>(), dq_rep.to_vector<float>());
  auto group_sum = [&](const Tensor& x) {
    const auto src = x.to_vector<float>();
    std::vector<double> out(std::size_t(b * t * kv * d), 0.0);
    for (std::int64_t r = 0; r < b * t; ++r)
      for (std::int64_t hh = 0; hh < h; ++hh)
        for (std::int64_t e = 0; e < d; ++e)
          out[std::size_t((r * kv + hh / group) * d + e)] += src[std::size_t((r * h + hh) * d + e)];
    return out;
  };
  EXPECT_TRUE(all_close(dk.to_vector<float>(), group_sum(dk_rep), 1e-6));
  EXPECT_TRUE(all_close(dv.to_vector<float>(), group_sum(dv_rep), 1e-6));
}

#if defined(_OPENMP)
TEST(AttentionGeneral, SameBitsWithOneAndTwoThreads) {
  std::mt19937 rng(47);
  const Cfg c{3, 70, 4, 2, 8, true, MaskKind::kRandom};
  const Forward r = forward(c, rng);
  const Tensor dout = random_tensor(r.out.shape(), rng);
  std::vector<std::vector<float>> got;
  for (int threads : {1, 2}) {
    Tensor out = Tensor::empty(r.out.shape(), DType::kF32), probs = Tensor::empty(r.probs.shape(), DType::kF32);
    Tensor dq = Tensor::empty(r.q.shape(), DType::kF32), dk = Tensor::empty(r.k.shape(), DType::kF32),
           dv = Tensor::empty(r.v.shape(), DType::kF32);
    test::with_omp_threads(threads, [&] {
      attention_forward(r.q, r.k, r.v, {int(c.h), int(c.kv), c.causal}, &*r.mask, out, probs);
      attention_backward(dout, r.q, r.k, r.v, probs, {int(c.h), int(c.kv), c.causal}, dq, dk, dv);
    });
    for (const Tensor* x : {&out, &probs, &dq, &dk, &dv}) got.push_back(x->to_vector<float>());
  }
  for (std::size_t i = 0; i < 5; ++i)
    EXPECT_EQ(std::memcmp(got[i].data(), got[i + 5].data(), got[i].size() * 4), 0) << "output " << i;
}
#endif

TEST(AttentionGeneral, EmptyBatchOrSequenceIsANoOp) {
  for (auto [b, t] : {std::pair<std::int64_t, std::int64_t>{0, 3}, {2, 0}}) {
    Tensor q = Tensor::zeros({b, t, 8}, DType::kF32), k = Tensor::zeros({b, t, 4}, DType::kF32);
    Tensor out = Tensor::zeros({b, t, 8}, DType::kF32), probs = Tensor::zeros({b, 2, t, t}, DType::kF32);
    Tensor mask = Tensor::zeros({b, t}, DType::kI32);
    EXPECT_NO_THROW(attention_forward(q, k, k, {2, 1, false}, &mask, out, probs));
    Tensor dq = q.clone(), dk = k.clone(), dv = k.clone();
    EXPECT_NO_THROW(attention_backward(out, q, k, k, probs, {2, 1, false}, dq, dk, dv));
  }
}

// f16 and bf16: every float tensor in the 16-bit dtype, against the f32 op on
// the same values (backward on the 16-bit probs, widened), within half_rtol.
TEST(AttentionGeneral, HalfMatchesF32OnTheSameValues) {
  using test::half_close;
  using test::random_half;
  std::mt19937 rng(48);
  for (DType dt : test::kHalfDtypes)
    for (const Cfg& c : {Cfg{1, 1, 2, 1, 4, true, MaskKind::kNone}, Cfg{2, 7, 4, 2, 6, false, MaskKind::kRandom},
                         Cfg{2, 70, 4, 1, 16, true, MaskKind::kPadding}, Cfg{0, 5, 2, 2, 4, true, MaskKind::kNone}}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " " << c);
      const auto q = random_half({c.b, c.t, c.h * c.d}, dt, rng, -2.f, 2.f);
      const auto k = random_half({c.b, c.t, c.kv * c.d}, dt, rng, -2.f, 2.f);
      const auto v = random_half({c.b, c.t, c.kv * c.d}, dt, rng);
      const auto dout = random_half({c.b, c.t, c.h * c.d}, dt, rng);
      const std::optional<Tensor> mask = make_mask(c, rng);
      const AttentionOptions o{int(c.h), int(c.kv), c.causal};
      Tensor out16 = test::nan_half(q.half.shape(), dt), probs16 = test::nan_half({c.b, c.h, c.t, c.t}, dt);
      Tensor out32 = test::nan_tensor(q.half.shape()), probs32 = test::nan_tensor({c.b, c.h, c.t, c.t});
      attention_forward(q.half, k.half, v.half, o, mask ? &*mask : nullptr, out16, probs16);
      attention_forward(q.f32, k.f32, v.f32, o, mask ? &*mask : nullptr, out32, probs32);
      EXPECT_TRUE(half_close(out16, out32, dt));
      EXPECT_TRUE(half_close(probs16, probs32, dt));
      Tensor dq16 = test::nan_half(q.half.shape(), dt), dk16 = test::nan_half(k.half.shape(), dt),
             dv16 = test::nan_half(v.half.shape(), dt);
      Tensor dq32 = test::nan_tensor(q.half.shape()), dk32 = test::nan_tensor(k.half.shape()),
             dv32 = test::nan_tensor(v.half.shape());
      attention_backward(dout.half, q.half, k.half, v.half, probs16, o, dq16, dk16, dv16);
      attention_backward(dout.f32, q.f32, k.f32, v.f32, test::cast_to(probs16, DType::kF32), o, dq32, dk32, dv32);
      EXPECT_TRUE(half_close(dq16, dq32, dt));
      EXPECT_TRUE(half_close(dk16, dk32, dt));
      EXPECT_TRUE(half_close(dv16, dv32, dt));
    }
}

TEST(AttentionGeneral, Errors) {
  auto t = [](Shape s, DType d = DType::kF32) { return Tensor::zeros(s, d); };
  const Tensor q = t({2, 5, 12}), k = t({2, 5, 6}), v = t({2, 5, 6});
  Tensor out = t({2, 5, 12}), probs = t({2, 4, 5, 5});
  // Head counts: positive, n_kv_head dividing n_head, n_head dividing q's width.
  EXPECT_TRUE(throws_error([&] { attention_forward(q, k, v, {4, 3, true}, nullptr, out, probs); },
                           ErrorKind::kShapeMismatch, {"attention_forward", "n_kv_head=3", "n_head=4", "{1,2,4}"}));
  EXPECT_TRUE(throws_error([&] { attention_forward(q, k, v, {4, 0, true}, nullptr, out, probs); },
                           ErrorKind::kShapeMismatch, {"n_kv_head=0", "positive"}));
  EXPECT_TRUE(throws_error([&] { attention_forward(q, k, v, {}, nullptr, out, probs); }, ErrorKind::kShapeMismatch,
                           {"n_head=0"}));
  EXPECT_TRUE(throws_error([&] { attention_forward(q, k, v, {5, 1, true}, nullptr, out, probs); },
                           ErrorKind::kShapeMismatch, {"last dimension of q [2, 5, 12]", "n_head=5"}));
  // k and v: (B, T, KV * D).
  EXPECT_TRUE(throws_error([&] { attention_forward(q, t({2, 5, 9}), v, {4, 2, true}, nullptr, out, probs); },
                           ErrorKind::kShapeMismatch, {"'k' must have shape [2, 5, 6]", "n_kv_head=2", "[2, 5, 9]"}));
  EXPECT_TRUE(throws_error([&] { attention_forward(q, k, t({2, 4, 6}), {4, 2, true}, nullptr, out, probs); },
                           ErrorKind::kShapeMismatch, {"'v' must have shape [2, 5, 6]"}));
  EXPECT_TRUE(throws_error([&] { attention_forward(t({10, 12}), k, v, {4, 2, true}, nullptr, out, probs); },
                           ErrorKind::kShapeMismatch, {"'q' must be 3-d"}));
  // Outputs.
  Tensor probs_wrong = t({2, 2, 5, 5});
  EXPECT_TRUE(throws_error([&] { attention_forward(q, k, v, {4, 2, true}, nullptr, out, probs_wrong); },
                           ErrorKind::kShapeMismatch, {"'probs'", "[2, 4, 5, 5]"}));
  // The key mask: i32, (B, T), on q's device.
  const Tensor mask_f = t({2, 5}), mask_shape = t({2, 4}, DType::kI32);
  EXPECT_TRUE(throws_error([&] { attention_forward(q, k, v, {4, 2, true}, &mask_f, out, probs); },
                           ErrorKind::kDTypeMismatch, {"'key_mask' must be i32", "f32"}));
  EXPECT_TRUE(throws_error([&] { attention_forward(q, k, v, {4, 2, true}, &mask_shape, out, probs); },
                           ErrorKind::kShapeMismatch, {"'key_mask' must have shape [2, 5]", "[2, 4]"}));
  const Tensor undefined;
  EXPECT_TRUE(throws_error([&] { attention_forward(q, k, v, {4, 2, true}, &undefined, out, probs); },
                           ErrorKind::kInvalidArgument, {"'key_mask' is undefined"}));
  // Dtypes: one compute dtype.
  EXPECT_TRUE(throws_error([&] { attention_forward(q, t({2, 5, 6}, DType::kBF16), v, {4, 2, true}, nullptr, out, probs); },
                           ErrorKind::kDTypeMismatch, {"'k' is bf16", "'q' is f32"}));
  // Backward shapes.
  Tensor dq = t({2, 5, 12}), dk = t({2, 5, 6}), dv = t({2, 5, 6}), dk_wrong = t({2, 5, 12});
  EXPECT_TRUE(throws_error([&] { attention_backward(out, q, k, v, probs, {4, 2, true}, dq, dk_wrong, dv); },
                           ErrorKind::kShapeMismatch, {"attention_backward", "'dk'", "[2, 5, 6]"}));
  EXPECT_TRUE(throws_error([&] { attention_backward(t({2, 5, 6}), q, k, v, probs, {4, 2, true}, dq, dk, dv); },
                           ErrorKind::kShapeMismatch, {"'dout'"}));
  EXPECT_TRUE(throws_error([&] { attention_backward(out, q, k, v, probs, {4, 4, true}, dq, dk, dv); },
                           ErrorKind::kShapeMismatch, {"'k' must have shape [2, 5, 12]"}));
  Tensor dv16 = t({2, 5, 6}, DType::kF16);
  EXPECT_TRUE(throws_error([&] { attention_backward(out, q, k, v, probs, {4, 2, true}, dq, dk, dv16); },
                           ErrorKind::kDTypeMismatch, {"'dv' is f16"}));
}

}  // namespace
}  // namespace ht::ops
