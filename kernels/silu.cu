// CUDA SiLU and SwiGLU, element-wise over the shared bodies of silu.cuh.
#include "cuda_launch.cuh"
#include "launch.h"
#include "silu.cuh"

namespace ht::cuda {
namespace {

__global__ void silu_forward_kernel(const float* x, float* y, std::int64_t n) {
  for (std::int64_t i = global_thread(); i < n; i += grid_threads()) y[i] = kern::silu_from_sigmoid(x[i], kern::sigmoid(x[i]));
}

__global__ void silu_backward_kernel(const float* x, const float* dy, float* dx, std::int64_t n) {
  for (std::int64_t i = global_thread(); i < n; i += grid_threads())
    dx[i] = kern::silu_grad_from_sigmoid(x[i], kern::sigmoid(x[i]), dy[i]);
}

// Element k of out (rows, f): row k / f, column k % f; gate and up of row r
// are gate_up[r * 2f + j] and gate_up[r * 2f + f + j].
__global__ void swiglu_forward_kernel(const float* gu, float* out, std::int64_t n, std::int64_t f) {
  for (std::int64_t k = global_thread(); k < n; k += grid_threads()) {
    const std::int64_t at = (k / f) * 2 * f + k % f;
    const float g = gu[at];
    out[k] = kern::silu_from_sigmoid(g, kern::sigmoid(g)) * gu[at + f];
  }
}

// Each thread reads its pair before writing it, so dgu may alias gu.
__global__ void swiglu_backward_kernel(const float* dout, const float* gu, float* dgu, std::int64_t n,
                                       std::int64_t f) {
  for (std::int64_t k = global_thread(); k < n; k += grid_threads()) {
    const std::int64_t at = (k / f) * 2 * f + k % f;
    const float g = gu[at], u = gu[at + f];
    float dg, du;
    kern::swiglu_grad(g, u, kern::sigmoid(g), dout[k], dg, du);
    dgu[at] = dg;
    dgu[at + f] = du;
  }
}

}  // namespace

cudaError_t launch_silu_forward(const float* x, float* y, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  silu_forward_kernel<<<grid_for(n), kBlock, 0, stream>>>(x, y, n);
  return cudaGetLastError();
}

cudaError_t launch_silu_backward(const float* x, const float* dy, float* dx, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  silu_backward_kernel<<<grid_for(n), kBlock, 0, stream>>>(x, dy, dx, n);
  return cudaGetLastError();
}

cudaError_t launch_swiglu_forward(const float* gate_up, float* out, std::int64_t rows, std::int64_t f,
                                  cudaStream_t stream) {
  const std::int64_t n = rows * f;
  if (n == 0) return cudaSuccess;
  swiglu_forward_kernel<<<grid_for(n), kBlock, 0, stream>>>(gate_up, out, n, f);
  return cudaGetLastError();
}

cudaError_t launch_swiglu_backward(const float* dout, const float* gate_up, float* dgate_up, std::int64_t rows,
                                   std::int64_t f, cudaStream_t stream) {
  const std::int64_t n = rows * f;
  if (n == 0) return cudaSuccess;
  swiglu_backward_kernel<<<grid_for(n), kBlock, 0, stream>>>(dout, gate_up, dgate_up, n, f);
  return cudaGetLastError();
}

}  // namespace ht::cuda
