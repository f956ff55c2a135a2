// CUDA slices and transposes: element copies by index arithmetic, one
// thread an element, for 2- and 4-byte elements (moved as their bits).
#include "cuda_launch.cuh"
#include "launch.h"

namespace ht::cuda {
namespace {

template <typename T>
__global__ void copy_rows_kernel(const T* src, std::int64_t src_pitch, T* dst, std::int64_t dst_pitch,
                                 std::int64_t rows, std::int64_t width) {
  const std::int64_t n = rows * width;
  for (std::int64_t k = global_thread(); k < n; k += grid_threads()) {
    const std::int64_t r = k / width, j = k % width;
    dst[r * dst_pitch + j] = src[r * src_pitch + j];
  }
}

// Output element k of (a, n1, b, n0, c) reads input (a, n0, b, n1, c).
template <typename T>
__global__ void transpose_kernel(const T* x, T* out, std::int64_t a, std::int64_t n0, std::int64_t b,
                                 std::int64_t n1, std::int64_t c) {
  const std::int64_t n = a * n1 * b * n0 * c;
  for (std::int64_t k = global_thread(); k < n; k += grid_threads()) {
    const std::int64_t ic = k % c, j0 = (k / c) % n0, ib = (k / (c * n0)) % b, j1 = (k / (c * n0 * b)) % n1,
                       ia = k / (c * n0 * b * n1);
    out[k] = x[(((ia * n0 + j0) * b + ib) * n1 + j1) * c + ic];
  }
}

}  // namespace

cudaError_t launch_copy_rows(const void* src, std::int64_t src_pitch, void* dst, std::int64_t dst_pitch,
                             std::int64_t rows, std::int64_t width, int element_bytes, cudaStream_t stream) {
  const std::int64_t n = rows * width;
  if (n == 0) return cudaSuccess;
  if (element_bytes == 2)
    copy_rows_kernel<<<grid_for(n), kBlock, 0, stream>>>(static_cast<const std::uint16_t*>(src), src_pitch,
                                                         static_cast<std::uint16_t*>(dst), dst_pitch, rows, width);
  else
    copy_rows_kernel<<<grid_for(n), kBlock, 0, stream>>>(static_cast<const std::uint32_t*>(src), src_pitch,
                                                         static_cast<std::uint32_t*>(dst), dst_pitch, rows, width);
  return cudaGetLastError();
}

cudaError_t launch_transpose(const void* x, void* out, const std::int64_t* dims, int element_bytes,
                             cudaStream_t stream) {
  const std::int64_t n = dims[0] * dims[1] * dims[2] * dims[3] * dims[4];
  if (n == 0) return cudaSuccess;
  if (element_bytes == 2)
    transpose_kernel<<<grid_for(n), kBlock, 0, stream>>>(static_cast<const std::uint16_t*>(x),
                                                         static_cast<std::uint16_t*>(out), dims[0], dims[1], dims[2],
                                                         dims[3], dims[4]);
  else
    transpose_kernel<<<grid_for(n), kBlock, 0, stream>>>(static_cast<const std::uint32_t*>(x),
                                                         static_cast<std::uint32_t*>(out), dims[0], dims[1], dims[2],
                                                         dims[3], dims[4]);
  return cudaGetLastError();
}

}  // namespace ht::cuda
