// matmul: validation and dispatch. On CUDA cuBLAS takes f16 and bf16
// operands as they are (f32 compute); on the CPU, sgemm runs on f32 copies
// through F32Staging.
#include "ht/ops/matmul.h"

#include <atomic>

#include "ops/backend_ops.h"
#include "ops/check.h"
#include "ops/f32_staging.h"

namespace ht::ops {
namespace {
std::atomic<CpuGemmBackend> g_cpu_backend{CpuGemmBackend::kOpenBlas};
}

void set_cpu_gemm_backend(CpuGemmBackend backend) { g_cpu_backend = backend; }
CpuGemmBackend cpu_gemm_backend() { return g_cpu_backend; }

void matmul(const Tensor& a, const Tensor& b, Tensor& c, const MatmulOptions& o) {
  const Device dev = detail::check_same_device("matmul", {{"a", &a}, {"b", &b}, {"c", &c}});
  detail::check_compute_dtype("matmul", {{"a", &a}, {"b", &b}, {"c", &c}});
  HT_CHECK((a.ndim() == 2 || a.ndim() == 3) && b.ndim() == a.ndim() && c.ndim() == a.ndim(),
           ErrorKind::kShapeMismatch, "matmul: a {}, b {}, c {} must all be 2-d or all 3-d (batched)",
           shape_str(a.shape()), shape_str(b.shape()), shape_str(c.shape()));
  const int r = a.ndim() - 2;  // index of the row dimension
  if (r == 1)
    HT_CHECK(a.size(0) == b.size(0) && b.size(0) == c.size(0), ErrorKind::kShapeMismatch,
             "matmul: batch sizes of a {}, b {}, c {} differ", shape_str(a.shape()), shape_str(b.shape()),
             shape_str(c.shape()));
  const auto m = o.trans_a ? a.size(r + 1) : a.size(r);
  const auto ka = o.trans_a ? a.size(r) : a.size(r + 1);
  const auto kb = o.trans_b ? b.size(r + 1) : b.size(r);
  const auto n = o.trans_b ? b.size(r) : b.size(r + 1);
  HT_CHECK(ka == kb && c.size(r) == m && c.size(r + 1) == n, ErrorKind::kShapeMismatch,
           "matmul: op(a) {}x{} @ op(b) {}x{} -> c must be {}x{}, got c {} (a {}{}, b {}{})", m, ka, kb, n, m, n,
           shape_str(c.shape()), shape_str(a.shape()), o.trans_a ? "^T" : "", shape_str(b.shape()),
           o.trans_b ? "^T" : "");
  if (dev.is_cuda()) {
    HT_DISPATCH(dev, matmul, a, b, c, o);
    return;
  }
  // beta == 0 ignores C's old contents (which may be NaN): nothing to widen.
  detail::F32Staging s;
  cpu::matmul(s.in(a), s.in(b), s.out(c, o.beta == 0.f ? detail::Staged::kOverwrite : detail::Staged::kAccumulate),
              o);
  s.commit();
}

}  // namespace ht::ops
