// ht::nn::SelfAttention: multi-head self-attention with separate q, k, v and
// output projections, grouped-query heads (n_kv_head key/value heads shared
// by n_head / n_kv_head query heads each; Llama), optional rotary position
// embeddings on q and k, a causal mask (decoders) or none (encoders), and an
// optional key padding mask.
//
// Padding: when the micro-batch's Context holds the side input the config
// names (AttentionConfig::key_mask, "key_mask" by default; (B, T) i32,
// nonzero = that key may be attended; the data gives it), keys are masked;
// a query with no admissible key outputs zeros. Naming it lets two masks
// coexist: an encoder's self-attention reads the source's padding, a
// decoder's the target's.
//
// Documents: when the Context holds the side input AttentionConfig::
// document_ids names (data::kDocumentIdsSide, "document_ids", by default;
// (B, T) i32, the document of each position; data::ShardBatches gives it),
// a query attends only to keys of its own document, besides the causal and
// padding masks (ops::attention_forward's segment ids). Rotary angles stay
// those of the row's positions (not reset per document): attention scores
// depend only on the distance between positions, so a document sees the
// same scores wherever it starts in the row, up to rounding.
//
// Tensor parallelism: q, k and v are column-parallel and the output
// projection row-parallel, so each rank computes n_head / tp query heads and
// n_kv_head / tp key/value heads (the query heads of a group stay on the
// rank of their key/value head).
//
// Context parallelism (a ContextParallel group of more than one): the input
// holds this rank's two chunks of each sequence; rotary angles are those of
// the positions' global index, and attention runs across the group
// (nn/context_parallel.h). No key padding mask and no document ids then
// (refused by name).
//
// Selective recomputation (Recompute::kSelective): it keeps q, k, v (rotated),
// the key mask and the document ids only; backward runs ops::attention_forward again for the
// output and log-sum-exp, saves the output as o_proj's input (o_proj keeps
// nothing in forward) and backpropagates.
#pragma once

#include "ht/data/data_source.h"
#include "ht/nn/context_parallel.h"
#include "ht/nn/linear.h"
#include "ht/ops/rope.h"

namespace ht::nn {

struct AttentionConfig {
  std::int64_t dim = 0;  // model width: the input's and output's last dimension
  int n_head = 1;
  int n_kv_head = 0;  // 0: n_head (plain multi-head attention)
  bool causal = true;
  bool bias = false;       // biases on the four projections
  bool qkv_bias = false;   // biases on q, k and v only, none on the output (Qwen2)
  float rope_theta = 0.f;  // > 0: rotary position embeddings with this base
  ops::RopeScaling rope_scaling;  // Llama 3.1's frequency scaling, when enabled
  std::int64_t max_positions = 0;  // the longest sequence (for the rotary table)
  std::string key_mask = "key_mask";  // the side input of the key padding mask (none given: every key)
  /// The side input of the document ids (none given: one document a row;
  /// empty: never read).
  std::string document_ids = std::string(data::kDocumentIdsSide);
};

class SelfAttention : public Module {
 public:
  /// Throws kConfig naming the value when n_head does not divide dim,
  /// n_kv_head n_head, tp n_kv_head, or rotary embeddings lack max_positions
  /// or meet an odd head size.
  SelfAttention(std::string name, const AttentionConfig& config, Device device, TensorParallel tp = {},
                ContextParallel cp = {});

  const AttentionConfig& config() const { return config_; }
  Linear& q_proj() { return *q_; }
  Linear& k_proj() { return *k_; }
  Linear& v_proj() { return *v_; }
  Linear& o_proj() { return *o_; }
  /// Module's rule, and o_proj keeps its input only when not kSelective.
  void set_recompute(Recompute mode) override;

 protected:
  /// x (B, T, dim) -> (B, T, dim); saves q, k, v (rotated), the output, its
  /// log-sum-exp per row, the key mask and the document ids (no output or
  /// lse under kSelective). Throws kNotSupported for a key mask or document
  /// ids under context parallelism.
  Tensor forward_impl(Context& ctx, const Tensor& x) override;
  Tensor backward_impl(Context& ctx, const Tensor& dy) override;

 private:
  AttentionConfig config_;
  ContextParallel cp_;
  int local_heads_, local_kv_heads_;
  Tensor rope_table_;  // (max_positions, head_dim / 2, 2) f32 cos/sin, when rotary
  Linear* q_;
  Linear* k_;
  Linear* v_;
  Linear* o_;
};

}  // namespace ht::nn
