// The GPU health checks: gpu_devices (how many, which), gpu_ecc and gpu_gemm
// (a checked f32 GEMM on each device, then its rate). Without CUDA they are
// skipped, or fail when the options expect GPUs.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "ht/config.h"
#include "ht/core/error.h"
#include "ht/core/tensor.h"
#include "ht/ops/matmul.h"
#include "resilience/health/check_util.h"
#include "resilience/health/checks.h"
#if HT_HAVE_CUDA
#include <cuda_runtime.h>

#include "core/cuda_context.h"
#endif

namespace ht::resilience::detail {

#if HT_HAVE_CUDA
namespace {

// The visible devices, `count` of them, against the count expected.
CheckResult check_gpu_devices(const HealthOptions& o, int& count) {
  std::string query_error;
  return run_check("gpu_devices", [&](CheckResult& r) {
    r.unit = "devices";
    r.threshold = o.expect_gpus;
    if (const cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) {
      cudaGetLastError();  // clear the error, so that later CUDA calls do not see it
      count = 0;
      query_error = fmt::format(" (cudaGetDeviceCount: {})", cudaGetErrorName(e));
    }
    r.value = count;
    if (count == 0) {
      r.skipped = o.expect_gpus == 0;
      r.ok = r.skipped;
      r.reason = r.skipped ? "no GPU: skipped" + query_error
                           : fmt::format("{} GPUs expected, none visible{}", o.expect_gpus, query_error);
      return;
    }
    std::string list;
    for (int d = 0; d < count; ++d) {
      cudaDeviceProp p{};
      if (cudaGetDeviceProperties(&p, d) != cudaSuccess) {
        cudaGetLastError();
        list += fmt::format("{}{}: properties unreadable", d ? "; " : "", d);
        continue;
      }
      list += fmt::format("{}{}: {} ({:.1f} GiB)", d ? "; " : "", d, p.name, double(p.totalGlobalMem) / (1ULL << 30));
    }
    r.reason = list;
    if (count < o.expect_gpus) {
      r.ok = false;
      r.reason = fmt::format("{} GPUs visible, {} expected: {}", count, o.expect_gpus, list);
    }
  });
}

// ECC: the runtime says whether it is on, not how many errors were seen;
// the counters need NVML, which hypertrain does not link.
CheckResult check_gpu_ecc(int count) {
  return run_check("gpu_ecc", [&](CheckResult& r) {
    r.unit = "devices";
    int enabled = 0;
    for (int d = 0; d < count; ++d) {
      int on = 0;
      if (cudaDeviceGetAttribute(&on, cudaDevAttrEccEnabled, d) != cudaSuccess) cudaGetLastError();
      enabled += on != 0;
    }
    r.value = enabled;
    r.reason = fmt::format("ECC enabled on {} of {} devices; error counts not checked: they need NVML, which is not "
                           "available to hypertrain",
                           enabled, count);
  });
}

// gemm: on each device, an f32 GEMM checked against the host's sgemm of the
// same operands, then the rate of a large one (cuBLAS, true f32, no TF32).
CheckResult check_gpu_gemm(const HealthOptions& o, int count) {
  return run_check("gpu_gemm", [&](CheckResult& r) {
    r.unit = "GFLOP/s";
    r.threshold = o.min_gpu_gemm_gflops;
    constexpr std::int64_t m = 200, k = 256, n = 72;
    const auto av = pseudo_random(m * k, 6), bv = pseudo_random(k * n, 7);
    const Tensor a_host = Tensor::from_vector(av, {m, k}), b_host = Tensor::from_vector(bv, {k, n});
    const std::int64_t s = o.gpu_gemm_size;
    double slowest = INFINITY;
    std::string rates;
    for (int d = 0; d < count; ++d) {
      const Device dev = Device::cuda(d);
      Tensor c = Tensor::empty({m, n}, DType::kF32, dev);
      ops::matmul(a_host.to(dev), b_host.to(dev), c);
      if (std::string bad = check_gemm(av, bv, c.to_vector<float>(), m, n, k, 1.0, fmt::format("cuda:{} gemm", d));
          !bad.empty()) {
        r.ok = false;
        r.reason = bad;
        return;
      }
      const Tensor a = Tensor::from_vector(pseudo_random(s * s, 8), {s, s}).to(dev);
      const Tensor b = Tensor::from_vector(pseudo_random(s * s, 9), {s, s}).to(dev);
      Tensor big = Tensor::empty({s, s}, DType::kF32, dev);
      const ht::cuda::DeviceGuard guard(dev);
      ops::matmul(a, b, big);  // warm-up: cuBLAS handle and kernel selection
      if (const cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess)
        throw Error(ErrorKind::kCuda, fmt::format("cuda:{}: {}", d, cudaGetErrorString(e)));
      constexpr int reps = 3;
      const auto t0 = Clock::now();
      for (int i = 0; i < reps; ++i) ops::matmul(a, b, big);
      if (const cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess)
        throw Error(ErrorKind::kCuda, fmt::format("cuda:{}: {}", d, cudaGetErrorString(e)));
      const double gflops = reps * 2.0 * double(s) * double(s) * double(s) / seconds_since(t0) / 1e9;
      slowest = std::min(slowest, gflops);
      rates += fmt::format("{}cuda:{} {:.0f}", d ? ", " : "", d, gflops);
    }
    r.value = slowest;
    r.reason = fmt::format("f32 gemm {}^3: {} GFLOP/s; {}x{}x{} matches the host", s, rates, m, k, n);
    require_min(r, fmt::format("f32 gemm {}^3 on the slowest device:", s));
  });
}

}  // namespace
#endif

void check_gpus(const HealthOptions& o, std::vector<CheckResult>& out) {
#if !HT_HAVE_CUDA
  const std::string why = "no GPU: skipped (this build has no CUDA backend)";
  CheckResult devices = skipped("gpu_devices", why, "devices");
  if (o.expect_gpus > 0) {
    devices.ok = false;
    devices.skipped = false;
    devices.threshold = o.expect_gpus;
    devices.reason = fmt::format("{} GPUs expected, but this build has no CUDA backend", o.expect_gpus);
  }
  out.push_back(devices);
  out.push_back(skipped("gpu_ecc", why, "devices"));
  out.push_back(skipped("gpu_gemm", why, "GFLOP/s"));
#else
  int count = 0;
  out.push_back(check_gpu_devices(o, count));
  if (count == 0) {
    out.push_back(skipped("gpu_ecc", "no GPU: skipped", "devices"));
    out.push_back(skipped("gpu_gemm", "no GPU: skipped", "GFLOP/s"));
    return;
  }
  out.push_back(check_gpu_ecc(count));
  out.push_back(check_gpu_gemm(o, count));
#endif
}

}  // namespace ht::resilience::detail
