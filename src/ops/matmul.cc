// matmul: validation and dispatch.
#include "ht/ops/matmul.h"

#include <atomic>

#include "ops/backend_ops.h"
#include "ops/check.h"

namespace ht::ops {
namespace {
std::atomic<CpuGemmBackend> g_cpu_backend{CpuGemmBackend::kOpenBlas};
}

void set_cpu_gemm_backend(CpuGemmBackend backend) { g_cpu_backend = backend; }
CpuGemmBackend cpu_gemm_backend() { return g_cpu_backend; }

void matmul(const Tensor& a, const Tensor& b, Tensor& c, const MatmulOptions& o) {
  const Device dev = detail::check_same_device("matmul", {{"a", &a}, {"b", &b}, {"c", &c}});
  HT_CHECK(a.dtype() == b.dtype() && b.dtype() == c.dtype(), ErrorKind::kDTypeMismatch,
           "matmul: dtypes of a ({}), b ({}) and c ({}) must match", dtype_name(a.dtype()), dtype_name(b.dtype()),
           dtype_name(c.dtype()));
  detail::check_float_dtype("matmul", "a", a);
  HT_CHECK(dev.is_cuda() || a.dtype() == DType::kF32, ErrorKind::kNotSupported,
           "matmul: the CPU backend computes in f32 only, got {}; cast the operands to f32", dtype_name(a.dtype()));
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
  HT_DISPATCH(dev, matmul, a, b, c, o);
}

}  // namespace ht::ops
