// Private: parallel loops over blocks of columns, for column reductions
// (bias, LayerNorm weight, embedding gradients) whose summation order must not
// depend on the number of threads.
#pragma once

#include <algorithm>
#include <cstdint>

namespace ht::ops::cpu {

/// Calls fn(j0, j1) for consecutive column blocks of [0, cols), in parallel.
template <typename Fn>
void for_column_blocks(std::int64_t cols, Fn&& fn) {
  constexpr std::int64_t kBlock = 64;  // 256 bytes of floats: whole cache lines per thread
  const std::int64_t blocks = (cols + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (std::int64_t blk = 0; blk < blocks; ++blk) fn(blk * kBlock, std::min(cols, (blk + 1) * kBlock));
}

}  // namespace ht::ops::cpu
