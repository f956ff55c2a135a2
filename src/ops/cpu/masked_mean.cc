// Host masked mean pooling over kernels/masked_mean.cuh: the forward sums each
// kept position's row into double accumulators, t in increasing order (the
// CUDA driver's order, so both give the same bits); the backward writes every
// row of dx from its batch row's count.
#include <algorithm>
#include <vector>

#include "masked_mean.cuh"
#include "ops/backend_ops.h"
#include "ops/cpu/vec_math.h"

namespace ht::ops::cpu {
namespace masked_mean_cpu {  // a namespace of its own: the unity build shares file-local names

constexpr std::int64_t kMeanColumns = 256;  // outputs per task: 2 KiB of double accumulators

// acc[0, width) += x[0, width), in double.
HT_CPU_MULTIVERSION void add_row(const float* x, std::int64_t width, double* acc) {
#pragma omp simd
  for (std::int64_t j = 0; j < width; ++j) acc[j] += double(x[j]);
}

std::int64_t kept_count(const std::int32_t* mask, std::int64_t t) {
  std::int64_t n = 0;
  for (std::int64_t i = 0; i < t; ++i) n += kern::masked_mean_keeps(mask[i]) ? 1 : 0;
  return n;
}

}  // namespace masked_mean_cpu

// Tasks are (batch row, block of kMeanColumns columns); each walks the kept
// positions of its row in order. The count is recounted per task: T integer
// reads against T * width float reads.
void masked_mean(const Tensor& x, const Tensor& mask, Tensor& out) {
  const std::int64_t b = x.size(0), t = x.size(1), c = x.size(2);
  const std::int64_t blocks = (c + masked_mean_cpu::kMeanColumns - 1) / masked_mean_cpu::kMeanColumns;
  const float* px = x.data<float>();
  const std::int32_t* pm = mask.data<std::int32_t>();
  float* po = out.data<float>();
#pragma omp parallel for schedule(static)
  for (std::int64_t task = 0; task < b * blocks; ++task) {
    const std::int64_t row = task / blocks, j0 = (task % blocks) * masked_mean_cpu::kMeanColumns;
    const std::int64_t width = std::min(masked_mean_cpu::kMeanColumns, c - j0);
    const std::int32_t* m = pm + row * t;
    double acc[masked_mean_cpu::kMeanColumns] = {};
    std::int64_t count = 0;
    for (std::int64_t i = 0; i < t; ++i)
      if (kern::masked_mean_keeps(m[i])) {
        masked_mean_cpu::add_row(px + (row * t + i) * c + j0, width, acc);
        ++count;
      }
    for (std::int64_t j = 0; j < width; ++j) po[row * c + j0 + j] = kern::masked_mean_finish(acc[j], count);
  }
}

// The counts first (B of them), then every (b, t) row of dx in parallel.
void masked_mean_backward(const Tensor& dout, const Tensor& mask, Tensor& dx) {
  const std::int64_t b = dx.size(0), t = dx.size(1), c = dx.size(2);
  const float* pg = dout.data<float>();
  const std::int32_t* pm = mask.data<std::int32_t>();
  float* pdx = dx.data<float>();
  std::vector<std::int64_t> count(static_cast<std::size_t>(b));
  for (std::int64_t row = 0; row < b; ++row) count[std::size_t(row)] = masked_mean_cpu::kept_count(pm + row * t, t);
#pragma omp parallel for schedule(static)
  for (std::int64_t bt = 0; bt < b * t; ++bt) {
    const std::int64_t row = bt / t, n = count[std::size_t(row)];
    const bool keep = kern::masked_mean_keeps(pm[bt]);
    const float* g = pg + row * c;
    float* d = pdx + bt * c;
#pragma omp simd
    for (std::int64_t j = 0; j < c; ++j) d[j] = kern::masked_mean_grad(g[j], n, keep);
  }
}

}  // namespace ht::ops::cpu
