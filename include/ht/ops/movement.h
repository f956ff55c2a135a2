// Data movement: a slice along one dimension, written or read, and the
// transpose of two dimensions; what concat, split, narrow and transpose on
// Vars (nn/functional.h) are built from. Any dtype of 2 or 4 bytes
// (f32, i32, f16, bf16); values are copied, never converted. Outputs are
// contiguous. Synchronous on CPU; on CUDA enqueued on the current stream.
#pragma once

#include <cstdint>

#include "ht/core/tensor.h"

namespace ht::ops {

/// out = x's elements [start, start + out.size(dim)) along `dim` (negative:
/// from the end); every other dimension of out equals x's.
void narrow(const Tensor& x, int dim, std::int64_t start, Tensor& out);
/// The same into a new tensor of `length` along `dim` (an activation).
Tensor narrow_copy(const Tensor& x, int dim, std::int64_t start, std::int64_t length);
/// Writes `part` into out's elements [start, start + part.size(dim)) along
/// `dim`, the rest of out untouched; every other dimension equal.
void narrow_into(const Tensor& part, int dim, std::int64_t start, Tensor& out);
/// out = x with dimensions d0 and d1 swapped (PyTorch's transpose, then
/// contiguous); out's shape is x's with those two sizes swapped.
void transpose(const Tensor& x, int d0, int d1, Tensor& out);

}  // namespace ht::ops
