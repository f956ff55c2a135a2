// Multi-head softmax self-attention, in two forms that share one driver per
// device (src/ops/cpu/attention.cc, kernels/attention_driver.cc):
//
// - packed: causal attention from GPT-2's c_attn output. qkv (B, T, 3C) holds
//   [Q | K | V] along the last dimension, each (B, T, C) split into n_head
//   heads of C / n_head channels.
// - general: q (B, T, H*D), k and v (B, Tk, KV*D) as separate tensors (Tk
//   keys, T in self-attention, the memory's length in cross-attention), with
//   grouped-query attention (KV key/value heads shared by H / KV query heads
//   each), an optional causal mask and an optional key padding mask.
//
// Algorithm (flash attention): the (T, T) score matrix of a head is never
// stored. The forward walks tiles of query rows; for each it walks the tiles
// of keys, computes the scores S = Q K^T / sqrt(D) of the tile, and keeps per
// row a running maximum m and sum l of exp(S - m) (an online softmax): when a
// new tile raises a row's maximum, the row's partial sum and its accumulated
// output are rescaled by exp(m_old - m_new) before the tile's exp(S - m) V is
// added. At the end out = acc / l and the row's log-sum-exp lse = m + log(l)
// is saved. Under the causal mask, tiles entirely above the diagonal are
// skipped and tiles crossing it are masked per element. The backward
// recomputes each tile's probabilities P = exp(S - lse) from the saved lse,
// and with D_i = sum_c dout[i, c] out[i, c] forms dS = P (dO V^T - D) /
// sqrt(D), from which dQ, dK and dV follow tile by tile.
//
// Segments (document masking): with segment ids seg (B, T) i32, query i of
// batch entry b attends key j only when seg[b, i] == seg[b, j], on top of the
// causal and key masks: several documents packed into one row attend each
// within its own (Megatron's reset_attention_mask, a block-diagonal mask).
// Tiles whose query rows and keys hold disjoint ranges of ids are skipped
// whole (any ids work; non-decreasing ones, as documents give, skip most);
// tiles that mix ids are masked per element.
//
// Saved for backward: out (which the caller keeps anyway) and lse (B, H, T),
// f32: O(T) per head instead of the (B, H, T, T) probabilities. Softmax scale
// 1/sqrt(D). Synchronous on CPU; on CUDA enqueued on the current stream.
//
// Dtypes: q, k, v (or qkv), out, dout and the gradients share one compute
// dtype, f32, f16 or bf16 (ht/ops/compute_dtype.h); lse is f32 whatever the
// compute dtype; the key mask and segment ids are i32. Results are deterministic: the same
// bits run to run, whatever the thread count (CPU) or scheduling (CUDA).
#pragma once

#include "ht/core/tensor.h"
#include "ht/ops/compute_dtype.h"

namespace ht::ops {

/// out (B, T, C) = softmax(causal(Q K^T / sqrt(C / n_head))) V per head;
/// lse (B, H, T) f32, the log-sum-exp of each row of scaled scores.
void attention_forward(const Tensor& qkv, int n_head, Tensor& out, Tensor& lse);
/// dqkv (B, T, 3C) overwritten from dout (B, T, C) and the forward's inputs,
/// out and lse.
void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse, int n_head,
                        Tensor& dqkv);
/// The same with segment ids: null (the two above), or (B, T) i32 on qkv's
/// device; query i of batch entry b attends key j <= i only when
/// segment_ids[b, i] == segment_ids[b, j]. Backward must get the forward's.
/// Throws kDTypeMismatch for ids that are not i32, kShapeMismatch for ids
/// of another shape, kDeviceMismatch for ids elsewhere.
void attention_forward(const Tensor& qkv, int n_head, const Tensor* segment_ids, Tensor& out, Tensor& lse);
void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse, int n_head,
                        const Tensor* segment_ids, Tensor& dqkv);

/// How the general attention op splits and masks its inputs.
struct AttentionOptions {
  int n_head = 0;     // H, query heads; positive
  int n_kv_head = 0;  // KV, key/value heads; positive and dividing H (KV == H: multi-head, 1: multi-query)
  bool causal = true; // query position i attends to keys [0, i + causal_offset] only
  /// Causal only: where query row 0 sits among the keys. 0 aligns the mask
  /// at the top left (PyTorch's is_causal); Tk - T at the bottom right (the
  /// queries are the last T of Tk positions: a chunk of a sequence split
  /// over ranks against all the keys before it, or decoding with a cache).
  std::int64_t causal_offset = 0;
};

/// General attention: out (B, T, H*D) and lse (B, H, T) f32 from q (B, T,
/// H*D), k and v (B, Tk, KV*D), D >= 1, Tk keys (any length, 0 included).
/// Query head h reads key/value head h / (H / KV): head h's channels are
/// [h*D, (h+1)*D) of q's last dimension, key/value head g's are [g*D,
/// (g+1)*D) of k's and v's.
///
/// key_mask: null, or (B, Tk) i32 where nonzero means "key j of batch entry
/// b may be attended" (a padding mask). Query i of batch b attends to keys j
/// with key_mask[b, j] != 0 and, when causal, j <= i + causal_offset (0:
/// aligned at the top left, as PyTorch's scaled_dot_product_attention with
/// is_causal). A query
/// with no such key gets an output row of zeros, lse = -inf and, in
/// backward, zero gradient.
///
/// Throws kShapeMismatch for shapes that do not fit each other or the head
/// counts, kDTypeMismatch for mixed or non-float dtypes (or a key mask that
/// is not i32, or an lse that is not f32), kDeviceMismatch for tensors on
/// different devices.
void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& options,
                       const Tensor* key_mask, Tensor& out, Tensor& lse);
/// dq (B, T, H*D), dk and dv (B, Tk, KV*D), all overwritten, from dout (B, T,
/// H*D), the forward's inputs, its out and lse. `options` and `key_mask` must
/// be the forward's (the probabilities are recomputed, masks included). dk
/// and dv of a key/value head are the sums over the query heads that share
/// it, added in head order, so the result is deterministic.
void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, const AttentionOptions& options, const Tensor* key_mask, Tensor& dq,
                        Tensor& dk, Tensor& dv);

/// General attention with segment ids (see the top): null (the two above),
/// or (B, T) i32 on q's device, for self-attention only (Tk == T: key j is
/// position j of the queries' sequence); query i of batch entry b attends
/// key j only when segment_ids[b, i] == segment_ids[b, j], besides the key
/// and causal masks. Backward must get the forward's. Throws as above, and
/// kShapeMismatch for ids with Tk != T.
void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& options,
                       const Tensor* key_mask, const Tensor* segment_ids, Tensor& out, Tensor& lse);
void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, const AttentionOptions& options, const Tensor* key_mask,
                        const Tensor* segment_ids, Tensor& dq, Tensor& dk, Tensor& dv);

}  // namespace ht::ops
