// CUDA token + position embedding, and the index range checks it shares with
// cross-entropy and index-select. Backward plans its scatter on the device: a
// stable radix sort of (row, position) pairs groups each token's positions in
// increasing order, and one block per run adds them in that order, so
// repeated tokens add up in the CPU's order without atomics and without the
// host seeing the ids.
#include <cub/device/device_radix_sort.cuh>

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

// The lowest bad position, with its id, by one 64-bit atomicMin, so the
// record does not depend on scheduling.
__global__ void record_out_of_range_kernel(const std::int32_t* ids, std::int64_t n, std::int64_t limit,
                                           std::int64_t row_length, IndexErrorRecord* record, std::int64_t allowed) {
  for (std::int64_t i = global_thread(); i < n; i += grid_threads()) {
    const std::int32_t id = ids[i];
    if ((id >= 0 && id < limit) || id == allowed) continue;
    atomicMin(&record->first, (static_cast<unsigned long long>(i) << 32) | static_cast<std::uint32_t>(id));
    record->limit = limit;
    record->row_length = row_length;
  }
}

// Sort keys: the shard-local row of each position's id, or `rows` (sorted
// last, skipped) for ids outside the shard or the vocabulary; the values are
// the positions, ascending, so the stable sort keeps each row's in order.
__global__ void embedding_row_keys_kernel(const std::int32_t* ids, std::int64_t n, std::int64_t start,
                                          std::int64_t rows, std::uint32_t* keys, std::int32_t* positions) {
  for (std::int64_t i = global_thread(); i < n; i += grid_threads()) {
    const std::int64_t row = std::int64_t(ids[i]) - start;
    keys[i] = row >= 0 && row < rows ? std::uint32_t(row) : std::uint32_t(rows);
    positions[i] = std::int32_t(i);
  }
}

// Block (x, y) takes the sorted positions p = x, x + gridDim.x, ...; where p
// starts a run of equal rows its threads own channels of that row and add
// the run's dout rows in increasing position order, exactly the CPU driver's
// order, so the result is deterministic and bit-identical to it.
__global__ void embedding_backward_wte_kernel(const float* dout, const std::uint32_t* keys,
                                              const std::int32_t* order, std::int64_t n, std::int64_t rows,
                                              std::int64_t c, float* dwte) {
  __shared__ std::int64_t run_end;
  for (std::int64_t p = blockIdx.x; p < n; p += gridDim.x) {
    const std::uint32_t key = keys[p];
    if (key >= rows || (p > 0 && keys[p - 1] == key)) continue;  // the same for the whole block
    if (threadIdx.x == 0) {
      std::int64_t end = p + 1;
      while (end < n && keys[end] == key) ++end;
      run_end = end;
    }
    __syncthreads();
    const std::int64_t end = run_end;
    float* e = dwte + std::int64_t(key) * c;
    for (std::int64_t j = std::int64_t(blockIdx.y) * blockDim.x + threadIdx.x; j < c;
         j += std::int64_t(gridDim.y) * blockDim.x) {
      float acc = e[j];
      for (std::int64_t q = p; q < end; ++q) acc += dout[std::int64_t(order[q]) * c + j];
      e[j] = acc;
    }
    __syncthreads();  // run_end is rewritten by the next run's thread 0
  }
}

int key_bits(std::int64_t rows) {  // bits that hold every key in [0, rows]
  int bits = 1;
  while ((std::int64_t(1) << bits) <= rows) ++bits;
  return bits;
}

std::size_t aligned(std::size_t bytes) { return (bytes + 255) / 256 * 256; }

std::size_t sort_temp_bytes(std::int64_t n, std::int64_t rows) {
  std::size_t bytes = 0;
  cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const std::uint32_t*>(nullptr),
                                  static_cast<std::uint32_t*>(nullptr), static_cast<const std::int32_t*>(nullptr),
                                  static_cast<std::int32_t*>(nullptr), int(n), 0, key_bits(rows));
  return bytes;
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

cudaError_t launch_record_out_of_range(const std::int32_t* ids, std::int64_t n, std::int64_t limit,
                                       std::int64_t row_length, IndexErrorRecord* record, cudaStream_t stream,
                                       std::int64_t allowed) {
  if (n == 0) return cudaSuccess;
  record_out_of_range_kernel<<<grid_for(n), kBlock, 0, stream>>>(ids, n, limit, row_length, record, allowed);
  return cudaGetLastError();
}

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

std::size_t embedding_plan_scratch_bytes(std::int64_t n, std::int64_t rows) {
  const std::size_t words = aligned(std::size_t(n) * 4);
  return 4 * words + aligned(sort_temp_bytes(n, rows));
}

cudaError_t launch_embedding_backward_wte(const float* dout, const std::int32_t* ids, std::int64_t n,
                                          std::int64_t start, std::int64_t rows, std::int64_t c, float* dwte,
                                          void* scratch, cudaStream_t stream) {
  if (n == 0 || c == 0) return cudaSuccess;
  const std::size_t words = aligned(std::size_t(n) * 4);
  auto* base = static_cast<unsigned char*>(scratch);
  auto* keys_in = reinterpret_cast<std::uint32_t*>(base);
  auto* keys_out = reinterpret_cast<std::uint32_t*>(base + words);
  auto* positions = reinterpret_cast<std::int32_t*>(base + 2 * words);
  auto* order = reinterpret_cast<std::int32_t*>(base + 3 * words);
  void* temp = base + 4 * words;
  std::size_t temp_bytes = sort_temp_bytes(n, rows);
  embedding_row_keys_kernel<<<grid_for(n), kBlock, 0, stream>>>(ids, n, start, rows, keys_in, positions);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  e = cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys_in, keys_out, positions, order, int(n), 0,
                                      key_bits(rows), stream);
  if (e != cudaSuccess) return e;
  const dim3 grid(grid_for(n, 1), unsigned(std::min<std::int64_t>((c + kBlock - 1) / kBlock, 65535)));
  embedding_backward_wte_kernel<<<grid, kBlock, 0, stream>>>(dout, keys_out, order, n, rows, c, dwte);
  return cudaGetLastError();
}

cudaError_t launch_embedding_backward_wpe(const float* dout, float* dwpe, std::int64_t batch, std::int64_t tc,
                                          cudaStream_t stream) {
  if (batch == 0 || tc == 0) return cudaSuccess;
  embedding_backward_wpe_kernel<<<grid_for(tc), kBlock, 0, stream>>>(dout, dwpe, batch, tc);
  return cudaGetLastError();
}

}  // namespace ht::cuda
