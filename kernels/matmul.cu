// CUDA GEMM: matmul (2-D and batched 3-D) through cuBLAS, and the strided
// gemm() that attention shares. f32, f16 and bf16 operands, f32 accumulation.
#include <cublas_v2.h>

#include "cast.cuh"
#include "cuda_context.h"
#include "cuda_launch.cuh"
#include "gemm.h"
#include "ops/backend_ops.h"

namespace ht::cuda {
namespace {

// C = beta * C for an empty product (k == 0), which cuBLAS's leading-dimension
// rules make awkward to express. beta == 0 writes zeros without reading, as a
// GEMM with beta == 0 does, so NaN in C does not survive.
template <typename T>
__global__ void scale_matrix_kernel(T* c, std::int64_t m, std::int64_t n, std::int64_t ldc, std::int64_t stride_c,
                                    std::int64_t batch, float beta) {
  const std::int64_t total = batch * m * n;
  for (std::int64_t idx = global_thread(); idx < total; idx += grid_threads()) {
    const std::int64_t i = idx / (m * n), r = (idx / n) % m, col = idx % n;
    const std::int64_t at = i * stride_c + r * ldc + col;
    kern::store(c, at, beta == 0.f ? 0.f : beta * kern::load(c, at));
  }
}

template <typename T>
void launch_scale_matrix(void* c, std::int64_t m, std::int64_t n, std::int64_t ldc, std::int64_t stride_c,
                         std::int64_t batch, float beta) {
  const std::int64_t total = batch * m * n;
  scale_matrix_kernel<<<grid_for(total), kBlock, 0, current_stream()>>>(static_cast<T*>(c), m, n, ldc, stride_c,
                                                                        batch, beta);
  HT_CUDA_CHECK_LAUNCH();
}

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
  if (k == 0) {
    switch (dtype) {
      case DType::kF32: launch_scale_matrix<float>(c, m, n, ldc, stride_c, batch, beta); break;
      case DType::kF16: launch_scale_matrix<f16>(c, m, n, ldc, stride_c, batch, beta); break;
      case DType::kBF16: launch_scale_matrix<bf16>(c, m, n, ldc, stride_c, batch, beta); break;
      case DType::kI32: cuda_data_type(dtype); break;  // throws
    }
    return;
  }
  // cuBLAS is column-major. A row-major (r, c) matrix with leading dimension ld
  // is, byte for byte, the column-major (c, r) matrix with the same ld: its
  // transpose. So C = op(A) op(B) is computed as C^T = op(B)^T op(A)^T, i.e.
  // cuBLAS gets B first, A second, sizes (n, m, k), and every trans flag and
  // leading dimension as stored. Worked example, no transposes: A (m, k) ld k
  // is column-major A^T (k x m); B (k, n) ld n is B^T (n x k); cuBLAS forms
  // B^T A^T = (AB)^T (n x m), which read row-major with ld n is AB (m, n).
  //
  // CUBLAS_COMPUTE_32F, not CUBLAS_COMPUTE_32F_FAST_TF32: f32 GEMMs stay exact
  // f32 (no TF32 rounding of the inputs), so they match the CPU reference to
  // f32 rounding; f16/bf16 inputs still use tensor cores with f32 accumulation.
  const cudaDataType type = cuda_data_type(dtype);
  HT_CUBLAS_CHECK(cublasGemmStridedBatchedEx_64(
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
  // Stored shapes: A (m, k) or (k, m) if trans_a; B (k, n) or (n, k) if trans_b.
  const ht::cuda::GemmOperand ga{a.data_ptr(), o.trans_a ? m : k, m * k, o.trans_a};
  const ht::cuda::GemmOperand gb{b.data_ptr(), o.trans_b ? k : n, k * n, o.trans_b};
  ht::cuda::gemm(a.dtype(), m, n, k, o.alpha, ga, gb, o.beta, c.data_ptr(), n, m * n, batch);
}

}  // namespace ht::ops::cuda
