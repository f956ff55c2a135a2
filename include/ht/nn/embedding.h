// ht::nn::Embedding: token embedding plus learned position embedding.
#pragma once

#include "ht/nn/context_parallel.h"
#include "ht/nn/module.h"
#include "ht/ops/vocab_shard.h"
#include "ht/nn/tensor_parallel.h"

namespace ht::nn {

class Embedding : public Module {
 public:
  /// wte (vocab, dim) and, if max_positions > 0, wpe (max_positions, dim).
  /// With tensor parallelism wte is vocab-parallel: each rank holds vocab / tp
  /// rows, looks up the tokens in its range and the group sums the results;
  /// wpe is replicated (added by tp rank 0 before the sum).
  /// The weights are named `token_name` and `position_name` ("wte", "wpe"
  /// as in GPT-2; Llama's is "weight", in a module named "embed_tokens").
  /// `padded_vocab` > vocab_size stores wte as (padded_vocab, dim): rows
  /// [vocab_size, padded_vocab) are padding (zero at the start, never looked
  /// up, no gradient; see ops::VocabShard); tp must divide padded_vocab
  /// instead of vocab_size. 0: no padding.
  Embedding(std::string name, std::int64_t vocab_size, std::int64_t max_positions, std::int64_t dim, Device device,
            TensorParallel tp = {}, const std::string& token_name = "wte", const std::string& position_name = "wpe",
            std::int64_t padded_vocab = 0);

  /// Under context parallelism the tokens are this rank's two chunks of
  /// each sequence, and each row gets the position of its global index.
  void set_context_parallel(ContextParallel cp) { cp_ = cp; }

  Parameter& token_weight() { return *wte_; }
  Parameter* position_weight() { return wpe_; }

 protected:
  /// tokens (B, T) i32 -> (B, T, dim); saves tokens.
  Tensor forward_impl(Context& ctx, const Tensor& tokens) override;
  /// Accumulates dwte, dwpe; returns an undefined tensor (tokens have no gradient).
  Tensor backward_impl(Context& ctx, const Tensor& dy) override;

 private:
  ops::VocabShard shard() const;

  Parameter* wte_;
  Parameter* wpe_ = nullptr;
  TensorParallel tp_;
  ContextParallel cp_;
  std::int64_t vocab_, rows_;  // real ids, and wte's full row count (padding included)
};

}  // namespace ht::nn
