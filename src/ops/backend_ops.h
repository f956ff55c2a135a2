// Private: the per-backend drivers behind every public op in include/ht/ops.
// The public functions (src/ops/*.cc) validate shapes, dtypes and devices once
// and then call the driver of the tensors' device: ht::ops::cpu (src/ops/cpu)
// or ht::ops::cuda (kernels/*.cu). Both namespaces declare the same
// signatures; drivers may assume validated arguments. A VocabShard reaches
// them resolved (size >= 0, start + local rows <= size); index range checks
// are the drivers' own.
#pragma once

#include "ht/config.h"
#include "ht/ops/attention.h"
#include "ht/ops/cross_entropy.h"
#include "ht/ops/dropout.h"
#include "ht/ops/optimizer_update.h"
#include "ht/ops/reduce.h"
#include "ht/ops/matmul.h"
#include "ht/ops/vocab_shard.h"

#define HT_DECLARE_BACKEND_OPS                                                                               \
  void matmul(const Tensor& a, const Tensor& b, Tensor& c, const MatmulOptions& o);                         \
  void add(const Tensor& a, const Tensor& b, Tensor& out);                                                  \
  void scale(Tensor& x, float s);                                                                           \
  /* b: a's element count, or (c) broadcast over the rows of a (rows, c) */                                 \
  void mul(const Tensor& a, const Tensor& b, Tensor& out);                                                  \
  /* db (c) = column sums of dy * a (rows, c), kern::kMulRowChunk rows a block; overwritten */              \
  void mul_column_sums(const Tensor& dy, const Tensor& a, Tensor& db);                                      \
  void bias_add(Tensor& y, const Tensor& bias);                                                             \
  void bias_grad(const Tensor& dy, Tensor& dbias);                                                          \
  void bias_fill(Tensor& y, const Tensor& bias);                                                            \
  void gelu_forward(const Tensor& x, Tensor& y);                                                            \
  void gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx);                                        \
  /* f32 only (the public op splits 16-bit calls) */                                                         \
  void gelu_backward_bias_grad(const Tensor& x, const Tensor& dy, Tensor& dx, Tensor& dbias);               \
  void silu_forward(const Tensor& x, Tensor& y);                                                            \
  void silu_backward(const Tensor& x, const Tensor& dy, Tensor& dx);                                        \
  void swiglu_forward(const Tensor& gate_up, Tensor& out);                                                  \
  void swiglu_backward(const Tensor& dout, const Tensor& gate_up, Tensor& dgate_up);                        \
  void layernorm_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y, Tensor& mean,        \
                         Tensor& rstd, float eps);                                                          \
  void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean,           \
                          const Tensor& rstd, Tensor& dx, Tensor& dw, Tensor& db);                          \
  void rmsnorm_forward(const Tensor& x, const Tensor& w, Tensor& y, Tensor& rstd, float eps);               \
  void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, Tensor& dx, \
                        Tensor& dw);                                                                        \
  /* forward, or the inverse rotation (backward) */                                                         \
  void rope(const Tensor& x, const Tensor& table, int n_head, bool inverse, Tensor& y);                     \
  /* lse (B, H, T) f32; segment_ids (B, T) i32, undefined for none */                                     \
  void attention_forward(const Tensor& qkv, int n_head, const Tensor& segment_ids, Tensor& out,             \
                         Tensor& lse);                                                                      \
  void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,      \
                          int n_head, const Tensor& segment_ids, Tensor& dqkv);                             \
  /* key_mask, segment_ids: undefined for none */                                                           \
  void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o,      \
                         const Tensor& key_mask, const Tensor& segment_ids, Tensor& out, Tensor& lse);      \
  void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,            \
                          const Tensor& out, const Tensor& lse, const AttentionOptions& o,                  \
                          const Tensor& key_mask, const Tensor& segment_ids, Tensor& dq, Tensor& dk,        \
                          Tensor& dv);                                                                      \
  void embedding_forward(const Tensor& tokens, const Tensor& wte, const Tensor& wpe, Tensor& out,           \
                         VocabShard shard);                                                                 \
  void embedding_backward(const Tensor& dout, const Tensor& tokens, Tensor& dwte, Tensor& dwpe,             \
                          VocabShard shard);                                                                \
  void cross_entropy_forward(const Tensor& logits, const Tensor& targets, Tensor& losses, Tensor& lse,      \
                             const CrossEntropyOptions& o);                                                 \
  void cross_entropy_shard_forward(const Tensor& logits, const Tensor& targets, VocabShard shard,           \
                                   Tensor& lse, Tensor& target_logit);                                      \
  void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse, float dloss,  \
                              Tensor& dlogits, VocabShard shard, const CrossEntropyOptions& o);             \
  void mse_forward(const Tensor& pred, const Tensor& target, Tensor& loss);                                 \
  void mse_backward(const Tensor& pred, const Tensor& target, float dloss, Tensor& dpred);                  \
  /* dim counted from 0; reduce_backward's counts dx's dimensions */                                        \
  void reduce(const Tensor& x, int dim, Reduction r, Tensor& out);                                          \
  void reduce_backward(const Tensor& dout, int dim, Reduction r, Tensor& dx);                               \
  void masked_mean(const Tensor& x, const Tensor& mask, Tensor& out);                                       \
  void masked_mean_backward(const Tensor& dout, const Tensor& mask, Tensor& dx);                            \
  void dropout(const Tensor& x, float p, const DropoutKey& key, Tensor& out);                               \
  void index_select(const Tensor& x, int dim, const Tensor& index, Tensor& out);                            \
  void index_select_backward(const Tensor& dout, int dim, const Tensor& index, Tensor& dx);                 \
  void cast(const Tensor& src, Tensor& dst);                                                                \
  /* rows x width elements (2 or 4 bytes) from src + src_at, rows src_pitch apart, to dst + dst_at */     \
  void copy_rows(const Tensor& src, std::int64_t src_at, std::int64_t src_pitch, Tensor& dst,              \
                 std::int64_t dst_at, std::int64_t dst_pitch, std::int64_t rows, std::int64_t width);       \
  /* x (a, n0, b, n1, c) -> out (a, n1, b, n0, c), 2- or 4-byte elements */                                 \
  void transpose(const Tensor& x, const std::int64_t* dims, Tensor& out);                                   \
  void softmax_forward(const Tensor& x, Tensor& y, bool log);                                               \
  void softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx, bool log);                           \
  void scale_and_check_finite(Tensor& x, float scale, Tensor& found);                                       \
  void sum_squares(const Tensor& x, Tensor& acc);                                                           \
  void adamw_update(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, const AdamWHyper& h);                 \
  void sgd_update(Tensor& p, const Tensor& g, Tensor& buf, const SgdHyper& h);

namespace ht::ops::cpu {
HT_DECLARE_BACKEND_OPS
}  // namespace ht::ops::cpu

#if HT_HAVE_CUDA
namespace ht::ops::cuda {
HT_DECLARE_BACKEND_OPS
}  // namespace ht::ops::cuda
#endif

#undef HT_DECLARE_BACKEND_OPS

/// Calls the driver for `device`: ht::ops::cpu::NAME or ht::ops::cuda::NAME.
#if HT_HAVE_CUDA
#define HT_DISPATCH(device, NAME, ...) \
  ((device).is_cuda() ? ::ht::ops::cuda::NAME(__VA_ARGS__) : ::ht::ops::cpu::NAME(__VA_ARGS__))
#else
#define HT_DISPATCH(device, NAME, ...) \
  ((device).is_cuda() ? ::ht::ops::detail::no_cuda(#NAME) : ::ht::ops::cpu::NAME(__VA_ARGS__))
#endif

namespace ht::ops::detail {
[[noreturn]] void no_cuda(const char* op);
}
