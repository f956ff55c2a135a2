// The materialised-softmax attention of ht 0.1 at commit e7e9dcf (the CPU
// driver's algorithm then), reduced to the packed causal form: per (batch,
// head) one OpenMP task of single-threaded sgemm calls on strided views, S =
// Q K^T written into probs, a vectorised softmax per row, O = P V; causal
// calls in blocks of 64 query rows so that the masked upper triangle is
// mostly skipped. Backward reads probs: dP = dO V^T, dS = P (dP - rowsum(P
// dP)) / sqrt(D), dQ = dS K, dK = dS^T Q, dV = P^T dO, with a (T, T) dS
// scratch per thread.
#include "attention_materialised_reference.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/cpu/vec_math.h"

namespace ht::bench {
namespace {

constexpr std::int64_t kCausalBlock = 64;  // the measured optimum then

void sgemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
           std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(m), int(n), int(k),
              alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
}

HT_CPU_MULTIVERSION void softmax_row(float* row, std::int64_t len, std::int64_t t) {
  float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
  for (std::int64_t j = 0; j < len; ++j) mx = row[j] > mx ? row[j] : mx;
  float sum = 0.f;
#pragma omp simd reduction(+ : sum)
  for (std::int64_t j = 0; j < len; ++j) {
    const float e = ops::cpu::vexp(row[j] - mx);
    row[j] = e;
    sum += e;
  }
  const float inv = 1.f / sum;
#pragma omp simd
  for (std::int64_t j = 0; j < len; ++j) row[j] *= inv;
  std::fill(row + len, row + t, 0.f);
}

HT_CPU_MULTIVERSION void softmax_grad_row(const float* p, float* d, std::int64_t len, std::int64_t t, float scale) {
  float dot = 0.f;
#pragma omp simd reduction(+ : dot)
  for (std::int64_t j = 0; j < len; ++j) dot += p[j] * d[j];
#pragma omp simd
  for (std::int64_t j = 0; j < len; ++j) d[j] = p[j] * (d[j] - dot) * scale;
  std::fill(d + len, d + t, 0.f);
}

}  // namespace

void materialised_attention_forward(const Tensor& qkv, int n_head, Tensor& out, Tensor& probs) {
  const std::int64_t batch = qkv.size(0), t = qkv.size(1), c = qkv.size(2) / 3, d = c / n_head, ld = 3 * c;
  const float* in = qkv.data<float>();
  float* o_all = out.data<float>();
  float* p_all = probs.data<float>();
  const float scale = 1.f / std::sqrt(float(d));
#pragma omp parallel for schedule(static)
  for (std::int64_t bh = 0; bh < batch * n_head; ++bh) {
    const std::int64_t b = bh / n_head, h = bh % n_head;
    const float* q = in + b * t * ld + h * d;
    const float* k = q + c;
    const float* v = q + 2 * c;
    float* p = p_all + bh * t * t;
    float* o = o_all + b * t * c + h * d;
    for (std::int64_t r0 = 0; r0 < t; r0 += kCausalBlock) {
      const std::int64_t r1 = std::min(t, r0 + kCausalBlock);
      sgemm(false, true, r1 - r0, r1, d, scale, q + r0 * ld, ld, k, ld, 0.f, p + r0 * t, t);
      for (std::int64_t i = r0; i < r1; ++i) softmax_row(p + i * t, i + 1, t);
      sgemm(false, false, r1 - r0, d, r1, 1.f, p + r0 * t, t, v, ld, 0.f, o + r0 * c, c);
    }
  }
}

void materialised_attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& probs, int n_head,
                                     Tensor& dqkv) {
  const std::int64_t batch = qkv.size(0), t = qkv.size(1), c = qkv.size(2) / 3, d = c / n_head, ld = 3 * c;
  const float* in = qkv.data<float>();
  const float* go_all = dout.data<float>();
  const float* p_all = probs.data<float>();
  float* g_all = dqkv.data<float>();
  const float scale = 1.f / std::sqrt(float(d));
#pragma omp parallel
  {
    std::vector<float> ds(static_cast<std::size_t>(t * t));
#pragma omp for schedule(static)
    for (std::int64_t bh = 0; bh < batch * n_head; ++bh) {
      const std::int64_t b = bh / n_head, h = bh % n_head;
      const float* q = in + b * t * ld + h * d;
      const float* k = q + c;
      const float* v = q + 2 * c;
      float* dq = g_all + b * t * ld + h * d;
      float* dk = dq + c;
      float* dv = dq + 2 * c;
      const float* p = p_all + bh * t * t;
      const float* go = go_all + b * t * c + h * d;
      for (std::int64_t r0 = 0; r0 < t; r0 += kCausalBlock) {
        const std::int64_t r1 = std::min(t, r0 + kCausalBlock);
        sgemm(false, true, r1 - r0, r1, d, 1.f, go + r0 * c, c, v, ld, 0.f, ds.data() + r0 * t, t);
        for (std::int64_t i = r0; i < r1; ++i) softmax_grad_row(p + i * t, ds.data() + i * t, i + 1, t, scale);
        sgemm(false, false, r1 - r0, d, r1, 1.f, ds.data() + r0 * t, t, k, ld, 0.f, dq + r0 * ld, ld);
      }
      for (std::int64_t c0 = 0; c0 < t; c0 += kCausalBlock) {
        const std::int64_t c1 = std::min(t, c0 + kCausalBlock);
        sgemm(true, false, c1 - c0, d, t - c0, 1.f, p + c0 * t + c0, t, go + c0 * c, c, 0.f, dv + c0 * ld, ld);
        sgemm(true, false, c1 - c0, d, t - c0, 1.f, ds.data() + c0 * t + c0, t, q + c0 * ld, ld, 0.f, dk + c0 * ld,
              ld);
      }
    }
  }
}

}  // namespace ht::bench
