// The compute health check: a host sgemm through ht::ops::matmul, checked
// for correctness, then timed.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "ht/core/tensor.h"
#include "ht/ops/matmul.h"
#include "resilience/health/check_util.h"
#include "resilience/health/checks.h"

namespace ht::resilience::detail {

// compute: correctness of a small awkward-sized sgemm, then the rate of a
// larger one (best of several, after a warm-up that pays for thread start-up).
CheckResult check_compute(const HealthOptions& o) {
  return run_check("compute", [&](CheckResult& r) {
    r.unit = "GFLOP/s";
    r.threshold = o.min_gemm_gflops;
    if (node_marked_unhealthy(o.faults, o.node)) {
      r.ok = false;
      r.reason = "fault injected: node-unhealthy";
      return;
    }
    constexpr std::int64_t m = 37, k = 53, n = 29;
    const auto av = pseudo_random(m * k, 1), bv = pseudo_random(k * n, 2);
    Tensor c = Tensor::empty({m, n}, DType::kF32);
    ops::matmul(Tensor::from_vector(av, {m, k}), Tensor::from_vector(bv, {k, n}), c);
    if (std::string bad = check_gemm(av, bv, c.to_vector<float>(), m, n, k, 1.0, "sgemm"); !bad.empty()) {
      r.ok = false;
      r.reason = bad;
      return;
    }
    const std::int64_t s = o.gemm_size;
    const Tensor a = Tensor::from_vector(pseudo_random(s * s, 3), {s, s});
    const Tensor b = Tensor::from_vector(pseudo_random(s * s, 4), {s, s});
    Tensor big = Tensor::empty({s, s}, DType::kF32);
    ops::matmul(a, b, big);
    double best_s = INFINITY;
    const auto t_all = Clock::now();
    for (int rep = 0; rep < 5 && (rep < 2 || seconds_since(t_all) < 0.3); ++rep) {
      const auto t0 = Clock::now();
      ops::matmul(a, b, big);
      best_s = std::min(best_s, seconds_since(t0));
    }
    r.value = 2.0 * double(s) * double(s) * double(s) / best_s / 1e9;
    r.reason = fmt::format("sgemm {}^3 (best of the timed runs); {}x{}x{} correct", s, m, k, n);
    require_min(r, fmt::format("sgemm {}^3 at", s));
  });
}

}  // namespace ht::resilience::detail
