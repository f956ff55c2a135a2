// Host mean-squared error: fixed-size chunks summed in double (a vector
// reduction in a fixed lane order), in parallel, then added in chunk order,
// so the loss has the same bits whatever the thread count; the backward is an
// element-wise vector loop.
#include <algorithm>
#include <vector>

#include "mse.cuh"
#include "ops/backend_ops.h"
#include "ops/cpu/vec_math.h"

namespace ht::ops::cpu {
namespace {

constexpr std::int64_t kChunk = 1 << 14;  // elements per partial sum, as sum_squares's

HT_CPU_MULTIVERSION double chunk_sum(const float* p, const float* t, std::int64_t n) {
  double s = 0.0;
#pragma omp simd reduction(+ : s)
  for (std::int64_t i = 0; i < n; ++i) s += kern::mse_term(p[i], t[i]);
  return s;
}

HT_CPU_MULTIVERSION void grad_block(const float* p, const float* t, float coef, float* d, std::int64_t n) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) d[i] = kern::mse_grad(p[i], t[i], coef);
}

}  // namespace

void mse_forward(const Tensor& pred, const Tensor& target, Tensor& loss) {
  const std::int64_t n = pred.numel(), chunks = (n + kChunk - 1) / kChunk;
  const float* pp = pred.data<float>();
  const float* pt = target.data<float>();
  std::vector<double> partial(std::size_t(chunks), 0.0);
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (std::int64_t c = 0; c < chunks; ++c) {
    const std::int64_t begin = c * kChunk;
    partial[std::size_t(c)] = chunk_sum(pp + begin, pt + begin, std::min(kChunk, n - begin));
  }
  double total = 0.0;
  for (double s : partial) total += s;
  *loss.data<float>() = float(total / double(n));
}

void mse_backward(const Tensor& pred, const Tensor& target, float dloss, Tensor& dpred) {
  const std::int64_t n = pred.numel(), chunks = (n + kChunk - 1) / kChunk;
  const float coef = float(2.0 * double(dloss) / double(n));
  const float* pp = pred.data<float>();
  const float* pt = target.data<float>();
  float* pd = dpred.data<float>();
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (std::int64_t c = 0; c < chunks; ++c) {
    const std::int64_t begin = c * kChunk;
    grad_block(pp + begin, pt + begin, coef, pd + begin, std::min(kChunk, n - begin));
  }
}

}  // namespace ht::ops::cpu
