// Host dropout over kernels/dropout.cuh's hash: the row's part of the hash
// once per row piece, then the column word per element. Tasks are fixed
// ranges of flat indices; a decision depends on its element's (row, column)
// only, never on the split.
#include <algorithm>

#include "dropout.cuh"
#include "ops/backend_ops.h"

namespace ht::ops::cpu {
namespace dropout_cpu {  // a namespace of its own: the unity build shares file-local names

constexpr std::int64_t kDropoutTaskElements = 1 << 14;  // elements per task: ~40 us of hashing

// out[0, n) from x[0, n), columns [col0, col0 + n) of the row whose hash is `row_hash`.
void dropout_span(const float* x, float* out, std::int64_t n, std::uint64_t row_hash, std::int64_t col0, float p,
                  float scale) {
  for (std::int64_t j = 0; j < n; ++j) {
    const std::uint64_t h = kern::dropout_absorb(row_hash, std::uint64_t(col0 + j));
    out[j] = kern::dropout_value(x[j], kern::dropout_keep(h, p), scale);
  }
}

}  // namespace dropout_cpu

// Element (r, j) is flat index r * len + j. Each task takes kDropoutTaskElements
// flat indices and walks them row piece by row piece: a task may start and
// end inside a row, and a row of 1 element is a piece of its own.
void dropout(const Tensor& x, float p, const DropoutKey& key, Tensor& out) {
  const std::int64_t n = x.numel(), rows = x.size(0), len = rows ? n / rows : 0;
  if (n == 0) return;
  const float scale = kern::dropout_scale(p);
  const float* px = x.data<float>();
  float* po = out.data<float>();
  const std::int64_t task = dropout_cpu::kDropoutTaskElements, tasks = (n + task - 1) / task;
#pragma omp parallel for schedule(static) if (tasks > 1)
  for (std::int64_t tk = 0; tk < tasks; ++tk) {
    const std::int64_t end = std::min(n, (tk + 1) * task);
    for (std::int64_t i = tk * task; i < end;) {
      const std::int64_t r = i / len, j = i - r * len, span = std::min(len - j, end - i);
      const std::uint64_t row_hash =
          kern::dropout_row_hash(key.seed, key.site, std::uint64_t(key.first_row + r));
      dropout_cpu::dropout_span(px + i, po + i, span, row_hash, j, p, scale);
      i += span;
    }
  }
}

}  // namespace ht::ops::cpu
