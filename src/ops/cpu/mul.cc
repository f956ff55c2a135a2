// Host element-wise product and the column sums of mul_backward's broadcast
// gradient, f32 (the public op stages 16-bit tensors), over kern::mul and
// kern::mul_term (kernels/mul.cuh).
#include <algorithm>
#include <vector>

#include "mul.cuh"
#include "ops/backend_ops.h"
#include "ops/cpu/vec_math.h"

namespace ht::ops::cpu {
namespace mul_cpu {  // a namespace of its own: the unity build shares file-local names

constexpr std::int64_t kMulTaskElements = 1 << 14;  // elements per task, as GELU's blocks
constexpr std::int64_t kSumColumns = 64;            // columns per task adding the partials: 512 bytes of sums

HT_CPU_MULTIVERSION void mul_span(const float* a, const float* b, float* out, std::int64_t n) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) out[i] = kern::mul(a[i], b[i]);
}

// acc[0, c) += dy[j] * a[j] in double, one row.
HT_CPU_MULTIVERSION void add_products(const float* dy, const float* a, std::int64_t c, double* acc) {
#pragma omp simd
  for (std::int64_t j = 0; j < c; ++j) acc[j] += kern::mul_term(dy[j], a[j]);
}

}  // namespace mul_cpu

// Same shape: blocks of elements. Broadcast: tasks of whole rows, enough of
// them for about kMulTaskElements elements, b read once per row.
void mul(const Tensor& a, const Tensor& b, Tensor& out) {
  const std::int64_t n = a.numel(), c = b.numel();
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* po = out.data<float>();
  if (c == n) {
    const std::int64_t tasks = (n + mul_cpu::kMulTaskElements - 1) / mul_cpu::kMulTaskElements;
#pragma omp parallel for schedule(static) if (tasks > 1)
    for (std::int64_t t = 0; t < tasks; ++t) {
      const std::int64_t begin = t * mul_cpu::kMulTaskElements;
      mul_cpu::mul_span(pa + begin, pb + begin, po + begin, std::min(mul_cpu::kMulTaskElements, n - begin));
    }
    return;
  }
  const std::int64_t rows = n / c, per_task = std::max<std::int64_t>(1, mul_cpu::kMulTaskElements / c);
  const std::int64_t tasks = (rows + per_task - 1) / per_task;
#pragma omp parallel for schedule(static) if (tasks > 1)
  for (std::int64_t t = 0; t < tasks; ++t)
    for (std::int64_t r = t * per_task, e = std::min(rows, (t + 1) * per_task); r < e; ++r)
      mul_cpu::mul_span(pa + r * c, pb, po + r * c, c);
}

// The order of kernels/mul.cuh: each block of kMulRowChunk rows summed in row
// order into its own double partials (blocks in parallel), then for each
// column the partials added block by block, in order. The partials take
// rows / 64 * c doubles, 1/32 of dy's bytes, as bias_grad's floats of 32
// rows do.
void mul_column_sums(const Tensor& dy, const Tensor& a, Tensor& db) {
  const std::int64_t c = db.numel(), rows = c ? a.numel() / c : 0;
  const std::int64_t chunk = kern::kMulRowChunk, chunks = (rows + chunk - 1) / chunk;
  const float* pdy = dy.data<float>();
  const float* pa = a.data<float>();
  float* pdb = db.data<float>();
  std::vector<double> partial(std::size_t(chunks * c), 0.0);
#pragma omp parallel for schedule(static)
  for (std::int64_t ch = 0; ch < chunks; ++ch) {
    double* acc = partial.data() + ch * c;
    for (std::int64_t r = ch * chunk, e = std::min(rows, (ch + 1) * chunk); r < e; ++r)
      mul_cpu::add_products(pdy + r * c, pa + r * c, c, acc);
  }
  const std::int64_t blocks = (c + mul_cpu::kSumColumns - 1) / mul_cpu::kSumColumns;
#pragma omp parallel for schedule(static) if (blocks > 1)
  for (std::int64_t blk = 0; blk < blocks; ++blk) {
    const std::int64_t j0 = blk * mul_cpu::kSumColumns, width = std::min(mul_cpu::kSumColumns, c - j0);
    double sum[mul_cpu::kSumColumns] = {};
    for (std::int64_t ch = 0; ch < chunks; ++ch) {
      const double* p = partial.data() + ch * c + j0;
      for (std::int64_t j = 0; j < width; ++j) sum[j] += p[j];
    }
    for (std::int64_t j = 0; j < width; ++j) pdb[j0 + j] = float(sum[j]);
  }
}

}  // namespace ht::ops::cpu
