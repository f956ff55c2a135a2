// Private: a tensor seen as (outer, size, inner) around one dimension, the
// index arithmetic of the ops that reduce or gather along any dimension
// (reduce, index_select) on both devices.
#pragma once

#include <cstdint>

#include "ht/core/tensor.h"

namespace ht::ops::detail {

/// Element (o, k, i) of the (outer, size, inner) view is at (o * size + k) *
/// inner + i. Worked example: shape (2, 5, 3) around dim 1 is outer 2, size
/// 5, inner 3, and element [1][4][2] is at (1 * 5 + 4) * 3 + 2 = 29.
struct AxisSplit {
  std::int64_t outer, size, inner;
};

/// The split of `shape` around dimension `dim` (0 <= dim < shape.size()).
inline AxisSplit split_axis(const Shape& shape, int dim) {
  AxisSplit s{1, shape[std::size_t(dim)], 1};
  for (int d = 0; d < dim; ++d) s.outer *= shape[std::size_t(d)];
  for (std::size_t d = std::size_t(dim) + 1; d < shape.size(); ++d) s.inner *= shape[d];
  return s;
}

}  // namespace ht::ops::detail
