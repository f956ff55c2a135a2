// ht::nn::LMHead: the output projection logits = h wte^T, tied to the token
// embedding.
//
// On the stage that holds the embedding it uses the embedding's wte (two
// gradient contributions per backward). On a pipeline's last stage, when the
// embedding lives on the first, it holds its own copy named "wte" (the model
// declares it in nn::Model::tied_weights: the parallel layer sums the two
// copies' gradients so they stay equal). A model with an untied head (Llama)
// uses the second form with a weight of its own name. Under tensor parallelism the projection is vocab-parallel: each
// rank produces the logits of its vocab / tp rows, never the full
// vocabulary, and backward sums dh over the group.
#pragma once

#include "ht/nn/module.h"
#include "ht/nn/tensor_parallel.h"

namespace ht::nn {

class LMHead : public Module {
 public:
  /// Tied to `wte` of the same stage.
  LMHead(Parameter& wte, TensorParallel tp);
  /// Holds its own (vocab, dim) weight, named `weight_name` (drawn from
  /// N(0, 1) like Embedding's wte unless the model sets another Init);
  /// `padded_vocab` > vocab_size stores (padded_vocab, dim), the rows from
  /// vocab_size on padding (zero; see Embedding). 0: no padding.
  LMHead(std::string name, std::string weight_name, std::int64_t vocab_size, std::int64_t dim, Device device,
         TensorParallel tp, std::int64_t padded_vocab = 0);

  Parameter& weight() { return *weight_; }

 protected:
  /// h (B, T, C) -> logits (B, T, rows / tp), rows the weight's (padding
  /// included: its columns are the caller's to ignore); saves h.
  Tensor forward_impl(Context& ctx, const Tensor& h) override;
  /// dwte += dlogits^T h; returns dh.
  Tensor backward_impl(Context& ctx, const Tensor& dlogits) override;

 private:
  Parameter* weight_;
  TensorParallel tp_;
};

}  // namespace ht::nn
