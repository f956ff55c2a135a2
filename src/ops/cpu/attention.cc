// Host softmax self-attention, one body for both public forms (packed qkv,
// and separate q, k, v with grouped-query heads and masks; see
// ops/attention_views.h). Each (batch, head) pair is an independent task on
// one OpenMP thread, made of single-threaded sgemm calls on strided views of
// the inputs. The softmax rows are vector loops (vexp, reductions in a fixed
// lane order).
//
// Causal calls skip the masked upper triangle in blocks of kCausalBlock
// query rows: the rows [r0, r1) need keys [0, r1) only, so the products with
// Q and P shrink to (r1 - r0) x r1, and backward's products with K^T and Q
// take only the rows at or below each block of keys: at T = 1024, 53% of
// the products of the full square (kCausalBlock has the measured times).
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/attention_views.h"
#include "ops/backend_ops.h"
#include "ops/cpu/vec_math.h"
#include "softmax.cuh"

namespace ht::ops::cpu {
namespace {

using detail::AttentionShape;
using detail::QkvViews;

// Query rows per block of a causal call. Below T = kCausalBlock a causal call
// is one block, the full square as before. Measured forward + backward on one
// thread, B 8, C 384, 6 heads: T 256 31.5 ms unblocked, 24.5 ms in blocks of
// 64, 26-29 ms in blocks of 128; T 1024 523 ms, 340 ms, 335-420 ms; blocks of
// 256 were slower than 64 at every T up to 1024.
constexpr std::int64_t kCausalBlock = 64;

void sgemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
           std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(m), int(n), int(k),
              alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
}

// Row i of the scores becomes softmax over its first `len` columns (the keys
// it may see, kern::attention_visible_keys) plus `bias` (0 for an admissible
// key, -inf for a masked one; null: no key mask), zeros after. A row whose
// keys are all masked becomes zeros. The loops count to `len` (j < len,
// never j <= i) and take the max as a select: GCC vectorises only those forms
// (the j <= i loops ran scalar, 4x slower).
HT_CPU_MULTIVERSION void softmax_row(float* row, std::int64_t len, std::int64_t t, const float* bias) {
  float mx = -INFINITY;
  if (bias) {
#pragma omp simd reduction(max : mx)
    for (std::int64_t j = 0; j < len; ++j) {
      const float s = row[j] + bias[j];
      row[j] = s;
      mx = s > mx ? s : mx;
    }
    if (mx == -INFINITY) len = 0;  // no admissible key: a row of zeros, and zero gradient in backward
  } else {
#pragma omp simd reduction(max : mx)
    for (std::int64_t j = 0; j < len; ++j) mx = row[j] > mx ? row[j] : mx;
  }
  float sum = 0.f;
#pragma omp simd reduction(+ : sum)
  for (std::int64_t j = 0; j < len; ++j) {
    const float e = vexp(row[j] - mx);  // a masked key: vexp(-inf) = 0
    row[j] = e;
    sum += e;
  }
  const float inv = 1.f / sum;
#pragma omp simd
  for (std::int64_t j = 0; j < len; ++j) row[j] *= inv;
  std::fill(row + len, row + t, 0.f);
}

// dS for one row from P and dP (in place over dP): softmax_grad(P, dP) *
// scale over the first `len` columns, zeros after. Masked keys have P = 0 and
// so dS = 0 without a mask here.
HT_CPU_MULTIVERSION void softmax_grad_row(const float* p, float* d, std::int64_t len, std::int64_t t, float scale) {
  float dot = 0.f;
#pragma omp simd reduction(+ : dot)
  for (std::int64_t j = 0; j < len; ++j) dot += p[j] * d[j];
#pragma omp simd
  for (std::int64_t j = 0; j < len; ++j) d[j] = kern::softmax_grad(p[j], d[j], dot) * scale;
  std::fill(d + len, d + t, 0.f);
}

/// The additive key mask of each batch entry: (B, T) floats, 0 where the key
/// may be attended and -inf where not; empty without a mask.
std::vector<float> key_bias(const Tensor& key_mask) {
  if (!key_mask.defined()) return {};
  const std::int32_t* m = key_mask.data<std::int32_t>();
  std::vector<float> bias(std::size_t(key_mask.numel()));
  for (std::size_t i = 0; i < bias.size(); ++i) bias[i] = m[i] != 0 ? 0.f : -INFINITY;
  return bias;
}

// The forward of every (batch, query head) pair: probs (B, H, T, T) and out
// (B, T, H*D).
void forward(const AttentionShape& s, const QkvViews<const float>& in, const std::vector<float>& bias, float* out,
             float* probs) {
  if (s.batch * s.t * s.head_dim == 0) return;
  const std::int64_t t = s.t, d = s.head_dim, ld_out = s.q_width();
  const float scale = 1.f / std::sqrt(float(d));
  const std::int64_t block = s.causal ? kCausalBlock : t;
#pragma omp parallel for schedule(static)
  for (std::int64_t bh = 0; bh < s.batch * s.n_head; ++bh) {
    const std::int64_t b = bh / s.n_head, h = bh % s.n_head, g = h / s.group();
    const float* q = in.q + b * t * in.ld_q + h * d;
    const float* k = in.k + b * t * in.ld_k + g * d;
    const float* v = in.v + b * t * in.ld_v + g * d;
    const float* row_bias = bias.empty() ? nullptr : bias.data() + b * t;
    float* p = probs + bh * t * t;
    float* o = out + b * t * ld_out + h * d;
    for (std::int64_t r0 = 0; r0 < t; r0 += block) {
      const std::int64_t r1 = std::min(t, r0 + block), keys = s.causal ? r1 : t;
      // S = scale * Q K^T for rows [r0, r1) and the keys they may see.
      sgemm(false, true, r1 - r0, keys, d, scale, q + r0 * in.ld_q, in.ld_q, k, in.ld_k, 0.f, p + r0 * t, t);
      for (std::int64_t i = r0; i < r1; ++i)
        softmax_row(p + i * t, kern::attention_visible_keys(i, t, s.causal), t, row_bias);
      // O = P V, into head h's columns of out.
      sgemm(false, false, r1 - r0, d, keys, 1.f, p + r0 * t, t, v, in.ld_v, 0.f, o + r0 * ld_out, ld_out);
    }
  }
}

// The backward, one task per (batch, key/value head): its query heads in
// order, each adding its part of dK and dV (beta 1 after the first), so the
// sums over a group have a fixed order without a scratch copy per head. dQ
// of each query head is its own. For multi-head attention (the packed op,
// KV = H) the tasks are the forward's (batch, head) pairs; with few key/value
// heads and a small batch (B * KV below the thread count) threads idle.
void backward(const AttentionShape& s, const float* dout, const QkvViews<const float>& in, const float* probs,
              const QkvViews<float>& grad) {
  if (s.batch * s.t * s.head_dim == 0) return;
  const std::int64_t t = s.t, d = s.head_dim, ld_out = s.q_width();
  const float scale = 1.f / std::sqrt(float(d));
  const std::int64_t block = s.causal ? kCausalBlock : t;
#pragma omp parallel
  {
    std::vector<float> ds(std::size_t(t * t));  // dP, then dS, for one (b, h)
#pragma omp for schedule(static)
    for (std::int64_t bg = 0; bg < s.batch * s.n_kv_head; ++bg) {
      const std::int64_t b = bg / s.n_kv_head, g = bg % s.n_kv_head;
      const float* k = in.k + b * t * in.ld_k + g * d;
      const float* v = in.v + b * t * in.ld_v + g * d;
      float* dk = grad.k + b * t * grad.ld_k + g * d;
      float* dv = grad.v + b * t * grad.ld_v + g * d;
      for (std::int64_t h = g * s.group(); h < (g + 1) * s.group(); ++h) {
        const float* q = in.q + b * t * in.ld_q + h * d;
        float* dq = grad.q + b * t * grad.ld_q + h * d;
        const float* p = probs + (b * s.n_head + h) * t * t;
        const float* go = dout + b * t * ld_out + h * d;
        const float beta = h == g * s.group() ? 0.f : 1.f;
        // By blocks of query rows: dP = dO V^T, dS = softmax_grad(P, dP) * scale, dQ = dS K.
        for (std::int64_t r0 = 0; r0 < t; r0 += block) {
          const std::int64_t r1 = std::min(t, r0 + block), keys = s.causal ? r1 : t;
          sgemm(false, true, r1 - r0, keys, d, 1.f, go + r0 * ld_out, ld_out, v, in.ld_v, 0.f, ds.data() + r0 * t, t);
          for (std::int64_t i = r0; i < r1; ++i)
            softmax_grad_row(p + i * t, ds.data() + i * t, kern::attention_visible_keys(i, t, s.causal), t, scale);
          sgemm(false, false, r1 - r0, d, keys, 1.f, ds.data() + r0 * t, t, k, in.ld_k, 0.f, dq + r0 * grad.ld_q,
                grad.ld_q);
        }
        // By blocks of keys [c0, c1), from the query rows that may see them
        // ([c0, T) when causal): dV += P^T dO, dK += dS^T Q.
        for (std::int64_t c0 = 0; c0 < t; c0 += block) {
          const std::int64_t c1 = std::min(t, c0 + block), i0 = s.causal ? c0 : 0;
          sgemm(true, false, c1 - c0, d, t - i0, 1.f, p + i0 * t + c0, t, go + i0 * ld_out, ld_out, beta,
                dv + c0 * grad.ld_v, grad.ld_v);
          sgemm(true, false, c1 - c0, d, t - i0, 1.f, ds.data() + i0 * t + c0, t, q + i0 * in.ld_q, in.ld_q, beta,
                dk + c0 * grad.ld_k, grad.ld_k);
        }
      }
    }
  }
}

}  // namespace

void attention_forward(const Tensor& qkv, int n_head, Tensor& out, Tensor& probs) {
  const AttentionShape s = detail::packed_attention_shape(qkv, n_head);
  forward(s, detail::packed_views<const float>(qkv.data<float>(), s.q_width()), {}, out.data<float>(), probs.data<float>());
}

void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& probs, int n_head, Tensor& dqkv) {
  const AttentionShape s = detail::packed_attention_shape(qkv, n_head);
  backward(s, dout.data<float>(), detail::packed_views<const float>(qkv.data<float>(), s.q_width()), probs.data<float>(),
           detail::packed_views(dqkv.data<float>(), s.q_width()));
}

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o,
                       const Tensor& key_mask, Tensor& out, Tensor& probs) {
  const AttentionShape s = detail::attention_shape(q, o);
  forward(s, detail::separate_views<const float>(q.data<float>(), k.data<float>(), v.data<float>(), s), key_bias(key_mask),
          out.data<float>(), probs.data<float>());
}

void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& probs,
                        const AttentionOptions& o, Tensor& dq, Tensor& dk, Tensor& dv) {
  const AttentionShape s = detail::attention_shape(q, o);
  backward(s, dout.data<float>(), detail::separate_views<const float>(q.data<float>(), k.data<float>(), v.data<float>(), s),
           probs.data<float>(), detail::separate_views(dq.data<float>(), dk.data<float>(), dv.data<float>(), s));
}

}  // namespace ht::ops::cpu
