// CUDA precision kernels: dtype casts, unscale with a finite check, and the
// fixed-order sum of squares, over the load/store bodies of cast.cuh.
#include "cast.cuh"
#include "cuda_launch.cuh"
#include "launch.h"

namespace ht::cuda {
namespace {

template <typename S, typename D>
__global__ void cast_kernel(const S* src, D* dst, std::int64_t n) {
  for (std::int64_t i = global_thread(); i < n; i += grid_threads()) kern::store(dst, i, kern::load(src, i));
}

// Each thread remembers whether any of its elements went non-finite and, if
// so, writes 1 once; concurrent writers all write the same value, so the
// order does not matter.
template <typename T>
__global__ void scale_and_check_finite_kernel(T* x, std::int64_t n, float scale, float* found) {
  bool all_finite = true;
  for (std::int64_t i = global_thread(); i < n; i += grid_threads())
    all_finite = kern::scale_check(x, i, scale) && all_finite;
  if (!all_finite) atomicExch(found, 1.f);
}

// Sum of squares in two fixed-shape stages. Stage 1: block b sums, in double,
// the elements a grid-stride loop gives its threads, combined by a fixed tree,
// into scratch[b]. Stage 2: one block adds the partials, again by a fixed
// tree, and adds the total to *acc. The grid size depends only on n, so the
// bits are the same on every run (and differ from the CPU's chunked sum only
// by double rounding, far below f32).
constexpr int kSumBlock = 256;
constexpr std::int64_t kSumItemsPerThread = 16;
constexpr int kMaxPartials = 1024;  // stage 2 reduces them with one 1024-thread block

template <typename T>
__global__ void sum_squares_partial_kernel(const T* x, std::int64_t n, double* partial) {
  __shared__ double smem[kWarp];
  double s = 0.0;
  for (std::int64_t i = global_thread(); i < n; i += grid_threads()) {
    const double v = kern::load(x, i);
    s += v * v;
  }
  s = block_sum(s, smem);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void sum_squares_final_kernel(const double* partial, int count, float* acc) {
  __shared__ double smem[kWarp];
  const double s = block_sum(int(threadIdx.x) < count ? partial[threadIdx.x] : 0.0, smem);
  if (threadIdx.x == 0) *acc += float(s);
}

template <typename S>
cudaError_t launch_cast_from(const S* src, DType dst_dtype, void* dst, std::int64_t n, cudaStream_t stream) {
  const unsigned grid = grid_for(n);
  switch (dst_dtype) {
    case DType::kF32: cast_kernel<<<grid, kBlock, 0, stream>>>(src, static_cast<float*>(dst), n); break;
    case DType::kF16: cast_kernel<<<grid, kBlock, 0, stream>>>(src, static_cast<f16*>(dst), n); break;
    case DType::kBF16: cast_kernel<<<grid, kBlock, 0, stream>>>(src, static_cast<bf16*>(dst), n); break;
    case DType::kI32: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_scale_and_check_finite_as(void* x, std::int64_t n, float scale, float* found,
                                             cudaStream_t stream) {
  scale_and_check_finite_kernel<<<grid_for(n), kBlock, 0, stream>>>(static_cast<T*>(x), n, scale, found);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_sum_squares_as(const void* x, std::int64_t n, double* scratch, float* acc, cudaStream_t stream) {
  const int partials = int(sum_squares_scratch_count(n));
  sum_squares_partial_kernel<<<partials, kSumBlock, 0, stream>>>(static_cast<const T*>(x), n, scratch);
  if (const cudaError_t err = cudaGetLastError(); err != cudaSuccess) return err;
  sum_squares_final_kernel<<<1, kMaxPartials, 0, stream>>>(scratch, partials, acc);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_cast(DType src_dtype, const void* src, DType dst_dtype, void* dst, std::int64_t n,
                        cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  switch (src_dtype) {
    case DType::kF32: return launch_cast_from(static_cast<const float*>(src), dst_dtype, dst, n, stream);
    case DType::kF16: return launch_cast_from(static_cast<const f16*>(src), dst_dtype, dst, n, stream);
    case DType::kBF16: return launch_cast_from(static_cast<const bf16*>(src), dst_dtype, dst, n, stream);
    case DType::kI32: break;
  }
  return cudaErrorInvalidValue;
}

cudaError_t launch_scale_and_check_finite(DType dtype, void* x, std::int64_t n, float scale, float* found,
                                          cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  switch (dtype) {
    case DType::kF32: return launch_scale_and_check_finite_as<float>(x, n, scale, found, stream);
    case DType::kF16: return launch_scale_and_check_finite_as<f16>(x, n, scale, found, stream);
    case DType::kBF16: return launch_scale_and_check_finite_as<bf16>(x, n, scale, found, stream);
    case DType::kI32: break;
  }
  return cudaErrorInvalidValue;
}

std::int64_t sum_squares_scratch_count(std::int64_t n) {
  const std::int64_t per_block = kSumBlock * kSumItemsPerThread;
  return std::clamp<std::int64_t>((n + per_block - 1) / per_block, 1, kMaxPartials);
}

cudaError_t launch_sum_squares(DType dtype, const void* x, std::int64_t n, double* scratch, float* acc,
                               cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  switch (dtype) {
    case DType::kF32: return launch_sum_squares_as<float>(x, n, scratch, acc, stream);
    case DType::kF16: return launch_sum_squares_as<f16>(x, n, scratch, acc, stream);
    case DType::kBF16: return launch_sum_squares_as<bf16>(x, n, scratch, acc, stream);
    case DType::kI32: break;
  }
  return cudaErrorInvalidValue;
}

}  // namespace ht::cuda
