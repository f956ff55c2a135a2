// Multi-head softmax self-attention, in two forms that share one driver per
// device (src/ops/cpu/attention.cc, kernels/attention_driver.cc):
//
// - packed: causal attention from GPT-2's c_attn output. qkv (B, T, 3C) holds
//   [Q | K | V] along the last dimension, each (B, T, C) split into n_head
//   heads of C / n_head channels.
// - general: q (B, T, H*D), k and v (B, T, KV*D) as separate tensors, with
//   grouped-query attention (KV key/value heads shared by H / KV query heads
//   each), an optional causal mask and an optional key padding mask.
//
// The softmax probabilities (B, H, T, T) are saved for backward; masked
// entries hold exactly 0. Softmax scale 1/sqrt(D). Synchronous on CPU; on
// CUDA enqueued on the current stream.
//
// Activations, probs and gradients share one compute dtype, f32, f16 or bf16
// (ht/ops/compute_dtype.h); the key mask is i32.
#pragma once

#include "ht/core/tensor.h"
#include "ht/ops/compute_dtype.h"

namespace ht::ops {

/// out (B, T, C) = softmax(mask(Q K^T / sqrt(C / n_head))) V per head; probs (B, H, T, T).
void attention_forward(const Tensor& qkv, int n_head, Tensor& out, Tensor& probs);
/// dqkv (B, T, 3C) overwritten from dout (B, T, C).
void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& probs, int n_head, Tensor& dqkv);

/// How the general attention op splits and masks its inputs.
struct AttentionOptions {
  int n_head = 0;     // H, query heads; positive
  int n_kv_head = 0;  // KV, key/value heads; positive and dividing H (KV == H: multi-head, 1: multi-query)
  bool causal = true; // query position i attends to keys [0, i] only
};

/// General attention: out (B, T, H*D) and probs (B, H, T, T) from q (B, T,
/// H*D), k and v (B, T, KV*D), D >= 1. Query head h reads key/value head
/// h / (H / KV): head h's channels are [h*D, (h+1)*D) of q's last dimension,
/// key/value head g's are [g*D, (g+1)*D) of k's and v's.
///
/// key_mask: null, or (B, T) i32 where nonzero means "key t of batch entry b
/// may be attended" (a padding mask). Query i of batch b attends to keys j
/// with key_mask[b, j] != 0 and, when causal, j <= i. A query with no such
/// key gets an output row of zeros, a probs row of zeros and, in backward,
/// zero gradient.
///
/// Throws kShapeMismatch for shapes that do not fit each other or the head
/// counts, kDTypeMismatch for mixed or non-float dtypes (or a key mask that
/// is not i32), kDeviceMismatch for tensors on different devices.
void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& options,
                       const Tensor* key_mask, Tensor& out, Tensor& probs);
/// dq (B, T, H*D), dk and dv (B, T, KV*D), all overwritten, from dout (B, T,
/// H*D) and the forward's probs (which carry the masks: no key_mask is
/// needed). dk and dv of a key/value head are the sums over the query heads
/// that share it, added in head order, so the result is deterministic.
/// `options` must be the forward's.
void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& probs,
                        const AttentionOptions& options, Tensor& dq, Tensor& dk, Tensor& dv);

}  // namespace ht::ops
