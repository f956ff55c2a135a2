// ht::nn::CausalSelfAttention: GPT-2's attention (c_attn -> causal softmax
// attention over n_head heads -> c_proj).
//
// Under selective recomputation (Recompute::kSelective) it keeps qkv only:
// backward runs ops::attention_forward again for the attention's output and
// log-sum-exp, then c_proj's backward (whose input it saves for it then:
// c_proj keeps nothing in forward) and the attention's.
//
// Under context parallelism (a ContextParallel group of more than one) the
// input holds this rank's two chunks of each sequence and the attention runs
// across the group (nn/context_parallel.h): q, k and v are cut out of the
// packed projection and attend to the whole sequence's keys.
//
// Documents: when the micro-batch's Context holds the side input
// data::kDocumentIdsSide ("document_ids", (B, T) i32, the document of each
// position; data::ShardBatches gives it), a query attends only to the keys
// of its own document (ops::attention_forward's segment ids). Positions are
// not reset per document: the model's learned positions stay those of the
// row. Refused by name under context parallelism (the ids would have to
// cross the sequence's split).
#pragma once

#include "ht/nn/context_parallel.h"
#include "ht/nn/linear.h"

namespace ht::nn {

class CausalSelfAttention : public Module {
 public:
  /// Throws kConfig unless n_head divides dim and tp divides n_head. With
  /// tensor parallelism each rank computes n_head / tp whole heads.
  CausalSelfAttention(std::string name, std::int64_t dim, int n_head, Device device, TensorParallel tp = {},
                      ContextParallel cp = {});

  Linear& c_attn() { return *c_attn_; }
  Linear& c_proj() { return *c_proj_; }
  /// Module's rule, and c_proj keeps its input only when not kSelective.
  void set_recompute(Recompute mode) override;

 protected:
  /// x (B, T, C) -> (B, T, C); saves qkv (q, k and v under context
  /// parallelism), the attention's output and its log-sum-exp per row (no
  /// output or lse under kSelective) and the document ids, if any. Throws
  /// kNotSupported for document ids under context parallelism.
  Tensor forward_impl(Context& ctx, const Tensor& x) override;
  Tensor backward_impl(Context& ctx, const Tensor& dy) override;

 private:
  /// What the attention core reads and backward keeps: the packed qkv, or
  /// under context parallelism q, k and v cut out of it (kept instead of
  /// it, so backward cuts nothing).
  std::vector<Tensor> attention_inputs(const Tensor& qkv) const;
  ops::AttentionOptions options() const;
  /// The attention core on those inputs: whole, or across the cp group;
  /// `docs`: the document ids (undefined: none; never under cp).
  void attend(const std::vector<Tensor>& in, const Tensor& docs, Tensor& att, Tensor& lse) const;
  void attend_backward(const Tensor& datt, const std::vector<Tensor>& in, const Tensor& docs, const Tensor& att,
                       const Tensor& lse, Tensor& dqkv) const;

  int n_head_;
  ContextParallel cp_;
  Linear* c_attn_;
  Linear* c_proj_;
};

}  // namespace ht::nn
