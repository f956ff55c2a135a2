// Gather along any dimension (index-select) and its backward, a
// deterministic scatter-add: taking the first token of each sequence, picking
// positions or classes. x, out, dout and dx share one compute dtype, f32, f16
// or bf16 (ht/ops/compute_dtype.h); the index is i32. Synchronous on CPU; on
// CUDA enqueued on the current stream (the index check waits for the device
// once, as embedding's does).
#pragma once

#include "ht/core/tensor.h"
#include "ht/ops/compute_dtype.h"

namespace ht::ops {

/// out = x with dimension `dim` (negative: counted from the end) replaced by
/// the K entries index (K) i32 names, in that order: out[..., k, ...] =
/// x[..., index[k], ...]. out has x's shape with K at `dim`; indices may
/// repeat. Example: x (B, T, C), dim 1, index {0} -> out (B, 1, C), the
/// first token of every sequence. An index outside [0, x.size(dim)) throws
/// kOutOfRange naming the index, its position and the bound, before any
/// output is written.
void index_select(const Tensor& x, int dim, const Tensor& index, Tensor& out);

/// dx = 0, then dx[..., index[k], ...] += dout[..., k, ...] for k in order:
/// dx is overwritten, and repeated indices add up in index order, so the
/// result is deterministic. dx has dout's shape with dimension `dim` of the
/// size the forward's x had. Index errors as in index_select.
void index_select_backward(const Tensor& dout, int dim, const Tensor& index, Tensor& dx);

}  // namespace ht::ops
