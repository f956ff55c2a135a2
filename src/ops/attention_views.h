// Private: where the attention drivers find each head's rows, so that one
// CPU body and one CUDA kernel family serve both public forms of the op
// (ht/ops/attention.h): the packed qkv tensor and separate q, k, v tensors.
#pragma once

#include <cstdint>

#include "ht/core/tensor.h"
#include "ht/ops/attention.h"

namespace ht::ops::detail {

/// The sizes of one attention call: t query rows, tk keys. The packed form
/// is the case tk == t, n_kv_head == n_head, causal.
struct AttentionShape {
  std::int64_t batch, t, tk, n_head, n_kv_head, head_dim;
  bool causal;
  std::int64_t offset = 0;  // causal: query i sees keys j <= i + offset

  /// Query heads per key/value head: query head h reads key/value head h / group().
  std::int64_t group() const { return n_head / n_kv_head; }
  /// Channels of q, out and dout rows: H * D.
  std::int64_t q_width() const { return n_head * head_dim; }
};

/// Q, K and V (or their gradients) as strided row views. Row i of batch
/// entry b of query head h starts at q + (b * t + i) * ld_q + h * head_dim;
/// key/value head g likewise at k + (b * tk + j) * ld_k + g * head_dim for key
/// j, and in v.
///
/// Worked example, packed qkv (B, T, 3C) with C = 768, 12 heads of 64: q is
/// the tensor's base, k = base + 768, v = base + 1536, and ld_q = ld_k = ld_v
/// = 2304, so head 3 of row i of batch b is at base + (b T + i) 2304 + 192
/// (query), + 960 (key), + 1728 (value). Separate tensors q (B, T, 768), k
/// and v (B, T, 256) (4 key/value heads of 64) have ld_q = 768, ld_k = ld_v = 256.
template <typename T>  // float, or const float
struct QkvViews {
  T* q;
  T* k;
  T* v;
  std::int64_t ld_q, ld_k, ld_v;
};

inline AttentionShape packed_attention_shape(const Tensor& qkv, int n_head) {
  const std::int64_t c = qkv.size(2) / 3;
  return {qkv.size(0), qkv.size(1), qkv.size(1), n_head, n_head, n_head ? c / n_head : 0, true};
}

inline AttentionShape attention_shape(const Tensor& q, const Tensor& k, const AttentionOptions& o) {
  return {q.size(0), q.size(1), k.size(1), o.n_head, o.n_kv_head, q.size(2) / o.n_head, o.causal, o.causal_offset};
}

/// The three thirds of a packed (B, T, 3C) tensor (qkv, or dqkv).
template <typename T>
QkvViews<T> packed_views(T* base, std::int64_t c) {
  return {base, base + c, base + 2 * c, 3 * c, 3 * c, 3 * c};
}

/// Separate (B, T, width) tensors: the row stride is each one's width.
template <typename T>
QkvViews<T> separate_views(T* q, T* k, T* v, const AttentionShape& s) {
  const std::int64_t kv_width = s.n_kv_head * s.head_dim;
  return {q, k, v, s.q_width(), kv_width, kv_width};
}

}  // namespace ht::ops::detail
