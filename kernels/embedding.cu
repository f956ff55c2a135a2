// CUDA token + position embedding, and the index range check it shares with
// cross-entropy. Backward scatters by token segments prepared on the host
// (embedding_driver.cc), so repeated tokens add up in position order without
// atomics.
#include "cuda_launch.cuh"
#include "launch.h"

namespace ht::cuda {
namespace {

__global__ void find_out_of_range_kernel(const std::int32_t* ids, std::int64_t n, std::int64_t limit,
                                         unsigned long long* first_bad) {
  for (std::int64_t i = global_thread(); i < n; i += grid_threads())
    if (ids[i] < 0 || ids[i] >= limit) atomicMin(first_bad, static_cast<unsigned long long>(i));
}

// One block per position (grid-stride over positions), threads across the
// channels: coalesced row copies, no division per element. wte holds rows
// [start, start + rows) of the vocabulary; an id outside them (another
// shard's) writes the position term alone, or zeros.
__global__ void embedding_forward_kernel(const std::int32_t* ids, const float* wte, const float* wpe, float* out,
                                         std::int64_t n, std::int64_t t, std::int64_t c, std::int64_t start,
                                         std::int64_t rows) {
  for (std::int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const std::int64_t row = std::int64_t(ids[i]) - start;
    float* o = out + i * c;
    if (row < 0 || row >= rows) {
      const float* pos = wpe ? wpe + (i % t) * c : nullptr;
      for (std::int64_t j = threadIdx.x; j < c; j += blockDim.x) o[j] = pos ? pos[j] : 0.f;
      continue;
    }
    const float* e = wte + row * c;
    if (wpe) {
      const float* pos = wpe + (i % t) * c;
      for (std::int64_t j = threadIdx.x; j < c; j += blockDim.x) o[j] = e[j] + pos[j];
    } else {
      for (std::int64_t j = threadIdx.x; j < c; j += blockDim.x) o[j] = e[j];
    }
  }
}

// Block x owns one distinct token; its threads own channels. Each thread adds
// the token's positions in increasing order, exactly the order of the CPU
// driver's loop, so the result is deterministic and bit-identical to it.
__global__ void embedding_backward_wte_kernel(const float* dout, const std::int32_t* order,
                                              const std::int32_t* seg_start, const std::int32_t* seg_token,
                                              std::int64_t segments, std::int64_t c, float* dwte) {
  for (std::int64_t s = blockIdx.x; s < segments; s += gridDim.x) {
    float* e = dwte + std::int64_t(seg_token[s]) * c;
    const std::int32_t begin = seg_start[s], end = seg_start[s + 1];
    for (std::int64_t j = std::int64_t(blockIdx.y) * blockDim.x + threadIdx.x; j < c;
         j += std::int64_t(gridDim.y) * blockDim.x) {
      float acc = e[j];
      for (std::int32_t p = begin; p < end; ++p) acc += dout[std::int64_t(order[p]) * c + j];
      e[j] = acc;
    }
  }
}

// dwpe[k] += dout[0][k] + dout[1][k] + ... in batch order, one thread per
// element of the (t, c) table: the CPU order again.
__global__ void embedding_backward_wpe_kernel(const float* dout, float* dwpe, std::int64_t batch,
                                              std::int64_t tc) {
  for (std::int64_t k = global_thread(); k < tc; k += grid_threads()) {
    float acc = dwpe[k];
    for (std::int64_t b = 0; b < batch; ++b) acc += dout[b * tc + k];
    dwpe[k] = acc;
  }
}

}  // namespace

cudaError_t launch_find_out_of_range(const std::int32_t* ids, std::int64_t n, std::int64_t limit,
                                     unsigned long long* first_bad, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  find_out_of_range_kernel<<<grid_for(n), kBlock, 0, stream>>>(ids, n, limit, first_bad);
  return cudaGetLastError();
}

cudaError_t launch_embedding_forward(const std::int32_t* ids, const float* wte, const float* wpe, float* out,
                                     std::int64_t n, std::int64_t t, std::int64_t c, std::int64_t start,
                                     std::int64_t rows, cudaStream_t stream) {
  if (n == 0 || c == 0) return cudaSuccess;
  embedding_forward_kernel<<<grid_for(n, 1), kBlock, 0, stream>>>(ids, wte, wpe, out, n, t, c, start, rows);
  return cudaGetLastError();
}

cudaError_t launch_embedding_backward_wte(const float* dout, const std::int32_t* order,
                                          const std::int32_t* seg_start, const std::int32_t* seg_token,
                                          std::int64_t segments, std::int64_t c, float* dwte, cudaStream_t stream) {
  if (segments == 0 || c == 0) return cudaSuccess;
  const dim3 grid(grid_for(segments, 1), unsigned(std::min<std::int64_t>((c + kBlock - 1) / kBlock, 65535)));
  embedding_backward_wte_kernel<<<grid, kBlock, 0, stream>>>(dout, order, seg_start, seg_token, segments, c, dwte);
  return cudaGetLastError();
}

cudaError_t launch_embedding_backward_wpe(const float* dout, float* dwpe, std::int64_t batch, std::int64_t tc,
                                          cudaStream_t stream) {
  if (batch == 0 || tc == 0) return cudaSuccess;
  embedding_backward_wpe_kernel<<<grid_for(tc), kBlock, 0, stream>>>(dout, dwpe, batch, tc);
  return cudaGetLastError();
}

}  // namespace ht::cuda
