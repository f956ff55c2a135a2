// ht::train MFU: the GEMM peak and the utilisation against it.
#include "ht/train/mfu.h"

#include <algorithm>
#include <chrono>

#include "ht/core/rng.h"
#include "ht/core/tensor.h"
#include "ht/ops/cast.h"
#include "ht/ops/matmul.h"

namespace ht::train {
namespace {

void wait_for(const Tensor& t) {
  if (t.device().is_cuda()) (void)t.item(0);  // a one-element copy to the host waits for the queue
}

}  // namespace

double measure_gemm_peak_gflops(Device device, DType dtype, std::int64_t n, int runs) {
  Tensor a = Tensor::empty({n, n}, DType::kF32), b = Tensor::empty({n, n}, DType::kF32);
  Rng rng(7);
  for (Tensor* t : {&a, &b}) {
    float* p = t->data<float>();
    for (std::int64_t i = 0; i < t->numel(); ++i) p[i] = rng.uniform() - 0.5f;
  }
  a = a.to(device);
  b = b.to(device);
  if (dtype != DType::kF32) {
    Tensor a16 = Tensor::empty({n, n}, dtype, device), b16 = Tensor::empty({n, n}, dtype, device);
    ops::cast(a, a16);
    ops::cast(b, b16);
    a = a16;
    b = b16;
  }
  Tensor c = Tensor::empty({n, n}, dtype, device);
  ops::matmul(a, b, c);  // warm-up: thread pool, page faults, cuBLAS handle
  wait_for(c);
  double best_s = 1e30;
  for (int r = 0; r < runs; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    ops::matmul(a, b, c);
    wait_for(c);
    best_s = std::min(best_s, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return 2.0 * double(n) * double(n) * double(n) / best_s * 1e-9;
}

DType peak_dtype(Device device, DType compute) { return device.is_cuda() ? compute : DType::kF32; }

double mfu_percent(double flops_per_token, double tokens_per_s, int ranks, double peak_tflops) {
  if (flops_per_token <= 0 || peak_tflops <= 0 || ranks <= 0) return 0.0;
  return 100.0 * flops_per_token * tokens_per_s / (double(ranks) * peak_tflops * 1e12);
}

}  // namespace ht::train
