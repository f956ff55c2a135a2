// ht::nn::Embedding: token embedding plus learned position embedding.
#pragma once

#include "ht/nn/module.h"

namespace ht::nn {

class Embedding : public Module {
 public:
  /// wte (vocab, dim) and, if max_positions > 0, wpe (max_positions, dim).
  Embedding(std::string name, std::int64_t vocab_size, std::int64_t max_positions, std::int64_t dim, Device device);

  Parameter& token_weight() { return *wte_; }
  Parameter* position_weight() { return wpe_; }

 protected:
  /// tokens (B, T) i32 -> (B, T, dim); saves tokens.
  Tensor forward_impl(Context& ctx, const Tensor& tokens) override;
  /// Accumulates dwte, dwpe; returns an undefined tensor (tokens have no gradient).
  Tensor backward_impl(Context& ctx, const Tensor& dy) override;

 private:
  Parameter* wte_;
  Parameter* wpe_ = nullptr;
};

}  // namespace ht::nn
