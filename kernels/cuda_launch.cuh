// Private: launch geometry and the warp/block reductions shared by the CUDA
// kernels (included by .cu files only). Every reduction here combines values
// in a fixed tree, so the same inputs give the same bits on every run.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace ht::cuda {

inline constexpr int kBlock = 256;  // threads per block of the element-wise kernels
inline constexpr int kWarp = 32;

/// Blocks for a grid-stride loop over `n` items (n > 0). Capped: past about
/// 2^16 blocks of 256 threads every SM is full many times over, and each
/// thread simply takes more items.
inline unsigned grid_for(std::int64_t n, int block = kBlock) {
  constexpr std::int64_t kMaxBlocks = std::int64_t(1) << 16;
  return unsigned(std::clamp<std::int64_t>((n + block - 1) / block, 1, kMaxBlocks));
}

/// First index of this thread and the stride of a grid-stride loop, in 64 bits
/// so that tensors past 2^31 elements are addressed correctly.
__device__ __forceinline__ std::int64_t global_thread() {
  return std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ std::int64_t grid_threads() { return std::int64_t(gridDim.x) * blockDim.x; }

/// Sum over the 32 lanes of a warp (all lanes active); every lane gets the
/// result. The butterfly pairs lanes symmetrically, so all lanes hold the same bits.
template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

/// Sum over a 1-D block whose size is a multiple of 32 (at most 1024); every
/// thread gets the result. `smem` holds 32 values of T. Contains
/// __syncthreads(): call it from every thread of the block, and the block may
/// call it again right after (the trailing barrier protects `smem`).
template <typename T>
__device__ __forceinline__ T block_sum(T v, T* smem) {
  const int lane = int(threadIdx.x) % kWarp, warp = int(threadIdx.x) / kWarp;
  const int warps = int(blockDim.x) / kWarp;
  v = warp_sum(v);
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  T total = lane < warps ? smem[lane] : T(0);
  total = warp_sum(total);
  __syncthreads();
  return total;
}

/// Maximum over a 1-D block, with the same contract as block_sum.
__device__ __forceinline__ float block_max(float v, float* smem) {
  const int lane = int(threadIdx.x) % kWarp, warp = int(threadIdx.x) / kWarp;
  const int warps = int(blockDim.x) / kWarp;
  v = warp_max(v);
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  float m = lane < warps ? smem[lane] : -INFINITY;
  m = warp_max(m);
  __syncthreads();
  return m;
}

/// Log-sum-exp of one row of v values, for every thread of the block: the
/// max, then the sum of exp(x - max), each reduced over the block in a fixed
/// tree: lse = max + log(sum). v == 0 gives -inf.
__device__ __forceinline__ float block_row_lse(const float* row, std::int64_t v, float* smem) {
  float mx = -INFINITY;
  for (std::int64_t j = threadIdx.x; j < v; j += blockDim.x) mx = fmaxf(mx, row[j]);
  mx = block_max(mx, smem);
  float sum = 0.f;
  for (std::int64_t j = threadIdx.x; j < v; j += blockDim.x) sum += expf(row[j] - mx);
  sum = block_sum(sum, smem);
  return mx + logf(sum);
}

/// Column reductions over a (rows, cols) matrix use 2-D blocks: threadIdx.x
/// picks one of kColTile adjacent columns, threadIdx.y one of kRowLanes lanes
/// that walk the rows lane, lane + kRowLanes, ... in order. Eight columns (32
/// bytes, one memory sector) by four lanes fill a warp, so reads stay whole
/// sectors while a 768-wide matrix still gets 96 blocks.
inline constexpr int kColTile = 8;
inline constexpr int kRowLanes = 64;

/// Sums `v` over threadIdx.y for each threadIdx.x, in a fixed tree order. The
/// result is meaningful in the threads with threadIdx.y == 0 only. `smem` holds
/// kColTile * kRowLanes floats and must not be shared with another live call.
/// Contains __syncthreads(): call it from every thread of the block.
__device__ __forceinline__ float sum_over_row_lanes(float v, float* smem) {
  const int x = int(threadIdx.x), y = int(threadIdx.y);
  smem[y * kColTile + x] = v;
  __syncthreads();
  for (int half = kRowLanes / 2; half > 0; half /= 2) {
    if (y < half) smem[y * kColTile + x] += smem[(y + half) * kColTile + x];
    __syncthreads();
  }
  return y == 0 ? smem[x] : 0.f;
}

}  // namespace ht::cuda
