// Token plus learned-position embedding.
#pragma once

#include "ht/core/tensor.h"

namespace ht::ops {

/// out (B, T, C) = wte[tokens] + wpe[0..T) ; tokens (B, T) i32, wte (V, C),
/// wpe (T_max >= T, C) or undefined for no position term. A token id outside
/// [0, V) throws kOutOfRange naming the id, its position and V.
void embedding_forward(const Tensor& tokens, const Tensor& wte, const Tensor& wpe, Tensor& out);
/// dwte += scatter of dout by token; dwpe += sum of dout over the batch (if defined).
/// Deterministic: the same inputs give the same bits.
void embedding_backward(const Tensor& dout, const Tensor& tokens, Tensor& dwte, Tensor& dwpe);

}  // namespace ht::ops
