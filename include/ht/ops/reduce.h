// Sum or mean along any one dimension, and its backward (a broadcast): mean
// pooling over a sequence, a sum over heads, a user's own reductions; and the
// masked mean over a padded sequence. x, out, dout and dx share one compute
// dtype, f32, f16 or bf16 (ht/ops/compute_dtype.h); masks are i32. Sums run
// in double, in a fixed order, so results do not depend on the thread count.
// Synchronous on CPU; on CUDA enqueued on the current stream.
#pragma once

#include <cstdint>

#include "ht/core/tensor.h"
#include "ht/ops/compute_dtype.h"

namespace ht::ops {

enum class Reduction {
  kSum,
  kMean,
};

/// out = the sum or mean of x (ndim >= 1) over dimension `dim` (negative:
/// counted from the end), with out's shape x's without `dim` (a 1-d x gives
/// a 0-d out of one element). Example: mean pooling x (B, T, C) over dim 1
/// gives out (B, C). A sum over an empty dimension is 0; a mean over one
/// throws kInvalidArgument. A bad `dim` throws kInvalidArgument, a wrong out
/// shape kShapeMismatch.
void reduce(const Tensor& x, int dim, Reduction reduction, Tensor& out);

/// dx = dout broadcast back along dimension `dim` of dx, which has `size`
/// elements there (dx's shape is dout's with `size` inserted at `dim`, which
/// counts dx's dimensions), divided by `size` for kMean. Overwritten.
void reduce_backward(const Tensor& dout, int dim, std::int64_t size, Reduction reduction, Tensor& dx);

/// Masked mean pooling over the sequence, as a sentence embedding of a
/// padded batch: out[b, c] = (sum over the t with mask[b, t] != 0 of
/// x[b, t, c]) / count_b, count_b the number of such t; a row with no kept
/// position gives 0. x (B, T, C), mask (B, T) i32 (nonzero keeps a position),
/// out (B, C), overwritten; all on one device. Sums run in double over t in
/// increasing order and are rounded once: the same bits whatever the thread
/// count, and the same on CPU and CUDA. Any dimension may be 0. A wrong dtype
/// throws kDTypeMismatch, a wrong shape kShapeMismatch, tensors on two
/// devices kDeviceMismatch.
void masked_mean(const Tensor& x, const Tensor& mask, Tensor& out);
/// The gradient of masked_mean: dx[b, t, c] = dout[b, c] / count_b where
/// mask[b, t] != 0, else 0 (all of a row with no kept position is 0). dout
/// (B, C), mask (B, T) i32, dx (B, T, C), overwritten. Errors as masked_mean.
void masked_mean_backward(const Tensor& dout, const Tensor& mask, Tensor& dx);

}  // namespace ht::ops
