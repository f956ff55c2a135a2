// CUDA side of matmul: the one kernel GEMM needs besides cuBLAS, for empty
// products (k == 0). The cuBLAS calls are in matmul_driver.cc.
#include "cast.cuh"
#include "cuda_launch.cuh"
#include "launch.h"

namespace ht::cuda {
namespace {

// C = beta * C. beta == 0 writes zeros without reading, as a GEMM with
// beta == 0 does, so NaN in C does not survive.
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
cudaError_t launch_scale_matrix_as(void* c, std::int64_t m, std::int64_t n, std::int64_t ldc,
                                   std::int64_t stride_c, std::int64_t batch, float beta, cudaStream_t stream) {
  scale_matrix_kernel<<<grid_for(batch * m * n), kBlock, 0, stream>>>(static_cast<T*>(c), m, n, ldc, stride_c,
                                                                      batch, beta);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_scale_matrix(DType dtype, void* c, std::int64_t m, std::int64_t n, std::int64_t ldc,
                                std::int64_t stride_c, std::int64_t batch, float beta, cudaStream_t stream) {
  if (m == 0 || n == 0 || batch == 0) return cudaSuccess;
  switch (dtype) {
    case DType::kF32: return launch_scale_matrix_as<float>(c, m, n, ldc, stride_c, batch, beta, stream);
    case DType::kF16: return launch_scale_matrix_as<f16>(c, m, n, ldc, stride_c, batch, beta, stream);
    case DType::kBF16: return launch_scale_matrix_as<bf16>(c, m, n, ldc, stride_c, batch, beta, stream);
    case DType::kI32: break;
  }
  return cudaErrorInvalidValue;
}

}  // namespace ht::cuda
