// Host casts, unscale-with-finite-check and sum of squares, over the shared
// load/store bodies in kernels/cast.cuh.
#include <vector>

#include "cast.cuh"
#include "ops/backend_ops.h"

namespace ht::ops::cpu {
namespace {

/// Calls fn(typed_pointer) with x's data as float*, f16* or bf16*.
template <typename Fn>
void visit_float(const Tensor& x, Fn&& fn) {
  switch (x.dtype()) {
    case DType::kF32: fn(static_cast<float*>(x.data_ptr())); break;
    case DType::kF16: fn(static_cast<f16*>(x.data_ptr())); break;
    case DType::kBF16: fn(static_cast<bf16*>(x.data_ptr())); break;
    case DType::kI32: break;  // rejected by the public op
  }
}

}  // namespace

void cast(const Tensor& src, Tensor& dst) {
  const std::int64_t n = src.numel();
  visit_float(src, [&](const auto* s) {
    visit_float(dst, [&](auto* d) {
#pragma omp parallel for schedule(static)
      for (std::int64_t i = 0; i < n; ++i) kern::store(d, i, kern::load(s, i));
    });
  });
}

void scale_and_check_finite(Tensor& x, float scale, Tensor& found) {
  const std::int64_t n = x.numel();
  bool all_finite = true;
  visit_float(x, [&](auto* p) {
#pragma omp parallel for schedule(static) reduction(&& : all_finite)
    for (std::int64_t i = 0; i < n; ++i) all_finite = kern::scale_check(p, i, scale) && all_finite;
  });
  if (!all_finite) *found.data<float>() = 1.f;
}

void sum_squares(const Tensor& x, Tensor& acc) {
  // Fixed-size chunks summed in double, then added in chunk order: the same
  // bits whatever the thread count. A tensor of one chunk (a bias, a norm
  // gain) stays on the calling thread: a parallel region per small tensor is
  // a barrier per small tensor, which costs most when the cores are shared.
  constexpr std::int64_t kChunk = 1 << 14;
  const std::int64_t n = x.numel(), chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(std::size_t(chunks), 0.0);
  visit_float(x, [&](const auto* p) {
#pragma omp parallel for schedule(static) if (chunks > 1)
    for (std::int64_t ch = 0; ch < chunks; ++ch) {
      // Eight running sums, element i into sum i % 8, added in a fixed order
      // at the end: independent chains, so the loop runs at the adder's
      // throughput instead of its latency (the 124M model's gradient norm
      // took 6% of a step with one chain), and still the same bits every run.
      constexpr int kLanes = 8;
      double lane[kLanes] = {};
      const std::int64_t begin = ch * kChunk, end = std::min(n, (ch + 1) * kChunk);
      std::int64_t i = begin;
      for (; i + kLanes <= end; i += kLanes)
        for (int k = 0; k < kLanes; ++k) {
          const double v = kern::load(p, i + k);
          lane[k] += v * v;
        }
      for (int k = 0; i < end; ++i, ++k) {
        const double v = kern::load(p, i);
        lane[k] += v * v;
      }
      double s = 0.0;
      for (int k = 0; k < kLanes; ++k) s += lane[k];
      partial[std::size_t(ch)] = s;
    }
  });
  double total = 0.0;
  for (double s : partial) total += s;
  *acc.data<float>() += float(total);
}

}  // namespace ht::ops::cpu
