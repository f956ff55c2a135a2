// Host fused softmax cross-entropy: one pass for max and log-sum-exp per row.
#include <algorithm>
#include <cmath>

#include "ops/backend_ops.h"
#include "softmax.cuh"

namespace ht::ops::cpu {
namespace {

void check_targets(const std::int32_t* tg, std::int64_t n, std::int64_t vocab) {
  for (std::int64_t i = 0; i < n; ++i)
    HT_CHECK(tg[i] >= 0 && tg[i] < vocab, ErrorKind::kOutOfRange,
             "cross_entropy: target {} at row {} is outside the vocabulary [0, {})", tg[i], i, vocab);
}

}  // namespace

void cross_entropy_forward(const Tensor& logits, const Tensor& targets, Tensor& losses, Tensor& lse) {
  const std::int64_t n = logits.size(0), v = logits.size(1);
  const std::int32_t* tg = targets.data<std::int32_t>();
  check_targets(tg, n, v);
  const float* pl = logits.data<float>();
  float* ploss = losses.data<float>();
  float* plse = lse.data<float>();
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) {
    const float* row = pl + i * v;
    float mx = -INFINITY;
    for (std::int64_t j = 0; j < v; ++j) mx = std::max(mx, row[j]);
    float sum = 0.f;
    for (std::int64_t j = 0; j < v; ++j) sum += std::exp(row[j] - mx);
    const float l = mx + std::log(sum);
    plse[i] = l;
    ploss[i] = l - row[tg[i]];
  }
}

void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse, float dloss,
                            Tensor& dlogits) {
  const std::int64_t n = logits.size(0), v = logits.size(1);
  const std::int32_t* tg = targets.data<std::int32_t>();
  check_targets(tg, n, v);
  const float* pl = logits.data<float>();
  const float* plse = lse.data<float>();
  float* pd = dlogits.data<float>();
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) {
    const float* row = pl + i * v;
    float* out = pd + i * v;
    for (std::int64_t j = 0; j < v; ++j) out[j] = kern::cross_entropy_grad(row[j], plse[i], j == tg[i], dloss);
  }
}

}  // namespace ht::ops::cpu
