// Private: parallel column reductions (bias, LayerNorm weight, embedding
// gradients) whose summation order must not depend on the number of threads.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace ht::ops::cpu {

/// Calls fn(j0, j1) for consecutive column blocks of [0, cols), in parallel.
template <typename Fn>
void for_column_blocks(std::int64_t cols, Fn&& fn) {
  constexpr std::int64_t kBlock = 64;  // 256 bytes of floats: whole cache lines per thread
  const std::int64_t blocks = (cols + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (std::int64_t blk = 0; blk < blocks; ++blk) fn(blk * kBlock, std::min(cols, (blk + 1) * kBlock));
}

/// Column sums of `n_out` matrices produced row by row, added into out[k]
/// (cols floats each, k < n_out): row_fn(r, acc) adds row r of matrix k
/// into acc[k * cols + j] (and may write whatever else that row gives, such
/// as the row of an input gradient). Rows go in fixed chunks of kRowChunk,
/// in parallel; each chunk sums its rows in order into its own partial sums,
/// and the partial sums are added chunk by chunk, in order: the result does
/// not depend on the thread count. Every access is a whole contiguous row,
/// where for_column_blocks reads 64 columns of every row with a stride:
/// 1.5-2x faster for the bias gradient of a 1024 x 1536 activation.
template <typename RowFn>
void column_sums_by_row_chunks(std::int64_t rows, std::int64_t cols, int n_out, float* const* out,
                               RowFn&& row_fn) {
  constexpr std::int64_t kRowChunk = 32;
  const std::int64_t chunks = (rows + kRowChunk - 1) / kRowChunk, stride = std::int64_t(n_out) * cols;
  std::vector<float> partial(std::size_t(chunks * stride), 0.f);
#pragma omp parallel for schedule(static)
  for (std::int64_t ch = 0; ch < chunks; ++ch) {
    float* acc = partial.data() + ch * stride;
    for (std::int64_t r = ch * kRowChunk, e = std::min(rows, (ch + 1) * kRowChunk); r < e; ++r) row_fn(r, acc);
  }
  // Chunk partials in order, each column block on one thread.
  for_column_blocks(cols, [&](std::int64_t j0, std::int64_t j1) {
    for (int k = 0; k < n_out; ++k)
      for (std::int64_t ch = 0; ch < chunks; ++ch) {
        const float* p = partial.data() + ch * stride + std::int64_t(k) * cols;
        for (std::int64_t j = j0; j < j1; ++j) out[k][j] += p[j];
      }
  });
}

}  // namespace ht::ops::cpu
