// Multi-head causal softmax self-attention from a packed QKV projection.
//
// qkv (B, T, 3C) holds [Q | K | V] along the last dimension, each (B, T, C)
// split into n_head heads of C / n_head channels, as GPT-2's c_attn produces.
// The softmax probabilities (B, H, T, T) are saved for backward.
//
// qkv, out, probs, dout and dqkv share one compute dtype, f32, f16 or bf16
// (ht/ops/compute_dtype.h).
#pragma once

#include "ht/core/tensor.h"
#include "ht/ops/compute_dtype.h"

namespace ht::ops {

/// out (B, T, C) = softmax(mask(Q K^T / sqrt(C / n_head))) V per head; probs (B, H, T, T).
void attention_forward(const Tensor& qkv, int n_head, Tensor& out, Tensor& probs);
/// dqkv (B, T, 3C) overwritten from dout (B, T, C).
void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& probs, int n_head, Tensor& dqkv);

}  // namespace ht::ops
