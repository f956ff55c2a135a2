// CUDA matmul driver and the strided gemm() it shares with attention: cuBLAS
// for f32, f16 and bf16 operands with f32 accumulation.
#include <cublas_v2.h>

#include "core/cuda_check.h"
#include "core/cuda_context.h"
#include "gemm.h"
#include "launch.h"
#include "ops/backend_ops.h"

namespace ht::cuda {
namespace {

cudaDataType cuda_data_type(DType dtype) {
  switch (dtype) {
    case DType::kF32: return CUDA_R_32F;
    case DType::kF16: return CUDA_R_16F;
    case DType::kBF16: return CUDA_R_16BF;
    case DType::kI32: break;
  }
  throw Error(ErrorKind::kInternal, fmt::format("gemm: no cuBLAS type for dtype {}", dtype_name(dtype)));
}

}  // namespace

void gemm(DType dtype, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const GemmOperand& a,
          const GemmOperand& b, float beta, void* c, std::int64_t ldc, std::int64_t stride_c, std::int64_t batch) {
  if (m == 0 || n == 0 || batch == 0) return;
  if (k == 0) {  // an empty sum; cuBLAS's leading-dimension rules make it awkward to pass
    HT_CUDA_CHECK(launch_scale_matrix(dtype, c, m, n, ldc, stride_c, batch, beta, current_stream()));
    return;
  }
  // cuBLAS is column-major. A row-major (r, c) matrix with leading dimension ld
  // is, byte for byte, the column-major (c x r) matrix with the same ld: its
  // transpose. So C = op(A) op(B) is computed as C^T = op(B)^T op(A)^T: cuBLAS
  // gets B first, A second, sizes (n, m, k), and every flag and leading
  // dimension as stored. Worked example without transposes: A (m, k) ld k is
  // column-major A^T (k x m); B (k, n) ld n is B^T (n x k); cuBLAS forms
  // B^T A^T = (AB)^T (n x m) with ld n, which read row-major is AB (m, n).
  //
  // CUBLAS_COMPUTE_32F rather than CUBLAS_COMPUTE_32F_FAST_TF32: f32 GEMMs stay
  // true f32 (no TF32 rounding of the inputs to 10 mantissa bits), so they agree
  // with the CPU reference to f32 rounding; f16 and bf16 inputs still run on
  // tensor cores with f32 accumulation. The _64 entry point takes 64-bit sizes,
  // so no dimension needs an int range check.
  const cudaDataType type = cuda_data_type(dtype);
  HT_CUBLAS_CHECK(::ht::detail::cublas().gemm_strided_batched_ex_64(
      cublas_handle(), b.trans ? CUBLAS_OP_T : CUBLAS_OP_N, a.trans ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha,
      b.data, type, b.ld, b.batch_stride, a.data, type, a.ld, a.batch_stride, &beta, c, type, ldc, stride_c, batch,
      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace ht::cuda

namespace ht::ops::cuda {

void matmul(const Tensor& a, const Tensor& b, Tensor& c, const MatmulOptions& o) {
  const ht::cuda::DeviceGuard guard(c.device());
  const int r = a.ndim() - 2;  // index of the row dimension
  const std::int64_t batch = r == 1 ? a.size(0) : 1;
  const std::int64_t m = c.size(r), n = c.size(r + 1), k = o.trans_a ? a.size(r) : a.size(r + 1);
  // Stored shapes: A (m, k), or (k, m) if trans_a; B (k, n), or (n, k) if trans_b.
  const ht::cuda::GemmOperand ga{a.data_ptr(), o.trans_a ? m : k, m * k, o.trans_a};
  const ht::cuda::GemmOperand gb{b.data_ptr(), o.trans_b ? k : n, k * n, o.trans_b};
  ht::cuda::gemm(a.dtype(), m, n, k, o.alpha, ga, gb, o.beta, c.data_ptr(), n, m * n, batch);
}

}  // namespace ht::ops::cuda
