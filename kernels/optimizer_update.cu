// CUDA fused AdamW and SGD updates: one grid-stride pass over the flat
// buffers, per element the bodies of optimizer_update.cuh, for f32, f16 and
// bf16 gradients.
#include "cast.cuh"
#include "cuda_launch.cuh"
#include "launch.h"
#include "optimizer_update.cuh"

namespace ht::cuda {
namespace {

template <typename G>
__global__ void adamw_kernel(float* param, const G* grad, float* m, float* v, std::int64_t n,
                             kern::AdamWCoeffs coeffs) {
  for (std::int64_t i = global_thread(); i < n; i += grid_threads())
    kern::adamw_element(param[i], kern::load(grad, i), m[i], v[i], coeffs);
}

template <typename G>
__global__ void sgd_kernel(float* param, const G* grad, float* buf, std::int64_t n, kern::SgdCoeffs coeffs) {
  for (std::int64_t i = global_thread(); i < n; i += grid_threads())
    kern::sgd_element(param[i], kern::load(grad, i), buf ? buf + i : nullptr, coeffs);
}

}  // namespace

cudaError_t launch_adamw_update(float* param, DType grad_dtype, const void* grad, float* m, float* v,
                                std::int64_t n, const kern::AdamWCoeffs& coeffs, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const unsigned grid = grid_for(n);
  switch (grad_dtype) {
    case DType::kF32:
      adamw_kernel<<<grid, kBlock, 0, stream>>>(param, static_cast<const float*>(grad), m, v, n, coeffs);
      break;
    case DType::kF16:
      adamw_kernel<<<grid, kBlock, 0, stream>>>(param, static_cast<const f16*>(grad), m, v, n, coeffs);
      break;
    case DType::kBF16:
      adamw_kernel<<<grid, kBlock, 0, stream>>>(param, static_cast<const bf16*>(grad), m, v, n, coeffs);
      break;
    case DType::kI32: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t launch_sgd_update(float* param, DType grad_dtype, const void* grad, float* momentum_buf,
                              std::int64_t n, const kern::SgdCoeffs& coeffs, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const unsigned grid = grid_for(n);
  switch (grad_dtype) {
    case DType::kF32:
      sgd_kernel<<<grid, kBlock, 0, stream>>>(param, static_cast<const float*>(grad), momentum_buf, n, coeffs);
      break;
    case DType::kF16:
      sgd_kernel<<<grid, kBlock, 0, stream>>>(param, static_cast<const f16*>(grad), momentum_buf, n, coeffs);
      break;
    case DType::kBF16:
      sgd_kernel<<<grid, kBlock, 0, stream>>>(param, static_cast<const bf16*>(grad), momentum_buf, n, coeffs);
      break;
    case DType::kI32: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace ht::cuda
