// Host causal self-attention. Each (batch, head) pair is an independent task
// on one OpenMP thread, made of single-threaded sgemm calls on strided views
// of qkv: Q, K and V of head h are the columns [h*hs, (h+1)*hs) of the three
// C-wide thirds of each 3C-wide row. The softmax rows are vector loops
// (vexp, reductions in a fixed lane order).
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/backend_ops.h"
#include "ops/cpu/vec_math.h"
#include "softmax.cuh"

namespace ht::ops::cpu {
namespace {

struct Dims {
  std::int64_t b, t, c, h, hs;
};

Dims dims_of(const Tensor& qkv, int n_head) {
  const std::int64_t c = qkv.size(2) / 3;
  return {qkv.size(0), qkv.size(1), c, n_head, c / n_head};
}

void sgemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
           std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(m), int(n), int(k),
              alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
}

}  // namespace

void attention_forward(const Tensor& qkv, int n_head, Tensor& out, Tensor& probs) {
  const Dims d = dims_of(qkv, n_head);
  if (d.b * d.t * d.c == 0) return;
  const float* pqkv = qkv.data<float>();
  float* pout = out.data<float>();
  float* pp = probs.data<float>();
  const float scale = 1.f / std::sqrt(float(d.hs));
  const std::int64_t ld = 3 * d.c;
#pragma omp parallel for schedule(static)
  for (std::int64_t bh = 0; bh < d.b * d.h; ++bh) {
    const std::int64_t b = bh / d.h, h = bh % d.h;
    const float* q = pqkv + b * d.t * ld + h * d.hs;
    const float* k = q + d.c;
    const float* v = q + 2 * d.c;
    float* p = pp + bh * d.t * d.t;
    // S = scale * Q K^T (the upper triangle is computed and then masked).
    sgemm(false, true, d.t, d.t, d.hs, scale, q, ld, k, ld, 0.f, p, d.t);
    // Row i keeps columns [0, i]. The loops count to `len` (j < len, never
    // j <= i) and take the max as a select: GCC vectorises only those forms
    // (the j <= i loops ran scalar, 4x slower).
    for (std::int64_t i = 0; i < d.t; ++i) {
      float* row = p + i * d.t;
      const std::int64_t len = i + 1;
      float mx = row[0];
#pragma omp simd reduction(max : mx)
      for (std::int64_t j = 0; j < len; ++j) mx = row[j] > mx ? row[j] : mx;
      float sum = 0.f;
#pragma omp simd reduction(+ : sum)
      for (std::int64_t j = 0; j < len; ++j) {
        const float e = vexp(row[j] - mx);
        row[j] = e;
        sum += e;
      }
      const float inv = 1.f / sum;
#pragma omp simd
      for (std::int64_t j = 0; j < len; ++j) row[j] *= inv;
      std::fill(row + len, row + d.t, 0.f);
    }
    // O = P V, written into head h's columns of out.
    sgemm(false, false, d.t, d.hs, d.t, 1.f, p, d.t, v, ld, 0.f, pout + b * d.t * d.c + h * d.hs, d.c);
  }
}

void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& probs, int n_head, Tensor& dqkv) {
  const Dims d = dims_of(qkv, n_head);
  if (d.b * d.t * d.c == 0) return;
  const float* pqkv = qkv.data<float>();
  const float* pdo = dout.data<float>();
  const float* pp = probs.data<float>();
  float* pdqkv = dqkv.data<float>();
  const float scale = 1.f / std::sqrt(float(d.hs));
  const std::int64_t ld = 3 * d.c;
#pragma omp parallel
  {
    std::vector<float> ds(std::size_t(d.t * d.t));  // dP, then dS, for one (b, h)
#pragma omp for schedule(static)
    for (std::int64_t bh = 0; bh < d.b * d.h; ++bh) {
      const std::int64_t b = bh / d.h, h = bh % d.h;
      const std::int64_t off = b * d.t * ld + h * d.hs;
      const float* q = pqkv + off;
      const float* k = q + d.c;
      const float* v = q + 2 * d.c;
      float* dq = pdqkv + off;
      float* dk = dq + d.c;
      float* dv = dq + 2 * d.c;
      const float* p = pp + bh * d.t * d.t;
      const float* go = pdo + b * d.t * d.c + h * d.hs;
      // dP = dO V^T ; dV = P^T dO
      sgemm(false, true, d.t, d.t, d.hs, 1.f, go, d.c, v, ld, 0.f, ds.data(), d.t);
      sgemm(true, false, d.t, d.hs, d.t, 1.f, p, d.t, go, d.c, 0.f, dv, ld);
      // dS = softmax_grad(P, dP) * scale, zero above the diagonal.
      for (std::int64_t i = 0; i < d.t; ++i) {
        const float* pr = p + i * d.t;
        float* dr = ds.data() + i * d.t;
        const std::int64_t len = i + 1;  // j < len vectorises, j <= i does not
        float dot = 0.f;
#pragma omp simd reduction(+ : dot)
        for (std::int64_t j = 0; j < len; ++j) dot += pr[j] * dr[j];
#pragma omp simd
        for (std::int64_t j = 0; j < len; ++j) dr[j] = kern::softmax_grad(pr[j], dr[j], dot) * scale;
        std::fill(dr + len, dr + d.t, 0.f);
      }
      // dQ = dS K ; dK = dS^T Q
      sgemm(false, false, d.t, d.hs, d.t, 1.f, ds.data(), d.t, k, ld, 0.f, dq, ld);
      sgemm(true, false, d.t, d.hs, d.t, 1.f, ds.data(), d.t, q, ld, 0.f, dk, ld);
    }
  }
}

}  // namespace ht::ops::cpu
