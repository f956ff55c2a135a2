// CUDA element-wise kernels: add, scale, bias add and its gradient, GELU
// forward and backward (the math from gelu.cuh).
#include "cuda_launch.cuh"
#include "gelu.cuh"
#include "launch.h"

namespace ht::cuda {
namespace {

__global__ void add_kernel(const float* a, const float* b, float* out, std::int64_t n) {
  for (std::int64_t i = global_thread(); i < n; i += grid_threads()) out[i] = a[i] + b[i];
}

__global__ void scale_kernel(float* x, std::int64_t n, float s) {
  for (std::int64_t i = global_thread(); i < n; i += grid_threads()) x[i] *= s;
}

// One block row per matrix row (grid-stride over rows), threads across the
// columns: no division per element, and bias reads are coalesced.
__global__ void bias_add_kernel(float* y, const float* bias, std::int64_t rows, std::int64_t c) {
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    float* row = y + r * c;
    for (std::int64_t j = threadIdx.x; j < c; j += blockDim.x) row[j] += bias[j];
  }
}

// Column sums in a fixed order: block x covers kColTile columns, its
// kRowLanes lanes each walk every kRowLanes-th row from the top, and the lanes
// are combined by a fixed tree. No atomics, so the bits never change between
// runs (they differ from the CPU's sequential sum only by rounding).
__global__ void bias_grad_kernel(const float* dy, float* dbias, std::int64_t rows, std::int64_t c) {
  __shared__ float smem[kColTile * kRowLanes];
  const std::int64_t j = std::int64_t(blockIdx.x) * kColTile + threadIdx.x;
  float acc = 0.f;
  if (j < c)
    for (std::int64_t r = threadIdx.y; r < rows; r += kRowLanes) acc += dy[r * c + j];
  const float total = sum_over_row_lanes(acc, smem);
  if (threadIdx.y == 0 && j < c) dbias[j] += total;
}

__global__ void gelu_forward_kernel(const float* x, float* y, std::int64_t n) {
  for (std::int64_t i = global_thread(); i < n; i += grid_threads()) y[i] = kern::gelu(x[i]);
}

__global__ void gelu_backward_kernel(const float* x, const float* dy, float* dx, std::int64_t n) {
  for (std::int64_t i = global_thread(); i < n; i += grid_threads()) dx[i] = kern::gelu_grad(x[i], dy[i]);
}

}  // namespace

cudaError_t launch_add(const float* a, const float* b, float* out, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  add_kernel<<<grid_for(n), kBlock, 0, stream>>>(a, b, out, n);
  return cudaGetLastError();
}

cudaError_t launch_scale(float* x, std::int64_t n, float s, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  scale_kernel<<<grid_for(n), kBlock, 0, stream>>>(x, n, s);
  return cudaGetLastError();
}

cudaError_t launch_bias_add(float* y, const float* bias, std::int64_t rows, std::int64_t c, cudaStream_t stream) {
  if (rows == 0 || c == 0) return cudaSuccess;
  bias_add_kernel<<<grid_for(rows, 1), kBlock, 0, stream>>>(y, bias, rows, c);
  return cudaGetLastError();
}

cudaError_t launch_bias_grad(const float* dy, float* dbias, std::int64_t rows, std::int64_t c,
                             cudaStream_t stream) {
  // rows == 0 still launches nothing: dbias += 0 changes no value.
  if (rows == 0 || c == 0) return cudaSuccess;
  const dim3 block(kColTile, kRowLanes);
  bias_grad_kernel<<<unsigned((c + kColTile - 1) / kColTile), block, 0, stream>>>(dy, dbias, rows, c);
  return cudaGetLastError();
}

cudaError_t launch_gelu_forward(const float* x, float* y, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  gelu_forward_kernel<<<grid_for(n), kBlock, 0, stream>>>(x, y, n);
  return cudaGetLastError();
}

cudaError_t launch_gelu_backward(const float* x, const float* dy, float* dx, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  gelu_backward_kernel<<<grid_for(n), kBlock, 0, stream>>>(x, dy, dx, n);
  return cudaGetLastError();
}

}  // namespace ht::cuda
