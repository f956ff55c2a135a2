// Dropout whose every decision is a pure function of four numbers (a seed, a
// call site, a global row and a position in the row), so a replay, a
// recomputation or another split of the batch drops exactly the same elements
// on every device and thread count. f32, f16 or bf16 (ht/ops/compute_dtype.h).
// Synchronous on CPU; on CUDA enqueued on the current stream.
#pragma once

#include <cstdint>

#include "ht/core/tensor.h"
#include "ht/ops/compute_dtype.h"

namespace ht::ops {

/// What a dropout mask depends on besides the element's place in x.
struct DropoutKey {
  /// The run's random seed (for example from the training config).
  std::uint64_t seed = 0;
  /// Which dropout of the model this is (layer and position in it), so that
  /// two dropouts over the same rows draw different masks. A step counter
  /// mixed in here (or in seed) gives each step a fresh mask.
  std::uint64_t site = 0;
  /// The global index of x's row 0: a micro-batch or data-parallel shard
  /// holding rows [first_row, first_row + rows) of a larger batch passes
  /// first_row, and draws the mask the whole batch would. Not negative.
  std::int64_t first_row = 0;
};

/// out = x with each element dropped (set to 0) with probability p and the
/// others scaled by 1 / (1 - p) (x * s, with s = 1 / (1 - p) computed once
/// in f32, so the expectation of out is x). The rows of x are its dimension
/// 0 (x has ndim >= 1); element j of row r (j the flat index within the row)
/// is kept iff
///
///   u = (kern::dropout_hash(key.seed, key.site, key.first_row + r, j) >> 40) * 2^-24  >=  p,
///
/// a counter-based hash (kernels/dropout.cuh: splitmix64's finaliser applied
/// to each of the four words in turn) mapped to a uniform u in [0, 1) on the
/// 2^24 grid. The decision depends on those four numbers only: never on the
/// device, the thread count or the split of rows into calls (rows [4, 8) with
/// first_row 4 give rows 4..7 of rows [0, 8) with first_row 0).
///
/// p must be in [0, 1) (else kInvalidArgument naming p; NaN included);
/// p == 0 copies x. key.first_row < 0 throws kInvalidArgument. out has x's
/// shape and dtype, overwritten; it may alias x.
///
/// Dropout is linear, so its backward is this same call on dy with the same
/// key and p: dx = dropout(dy, p, key). Nothing needs to be saved from the
/// forward.
void dropout(const Tensor& x, float p, const DropoutKey& key, Tensor& out);

}  // namespace ht::ops
