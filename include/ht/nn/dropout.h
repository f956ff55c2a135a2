// ht::nn::Dropout: zeroes each element with probability p in a training
// forward and scales the rest by 1 / (1 - p); the identity otherwise.
//
// Which elements drop depends only on the run's seed, the module's path
// ("h.3.drop_1"), the global index of the element's sample and the
// element's place within its sample (ops::dropout): the same under every
// layout (data parallelism, accumulation, pipelines, micro-batch size), in
// a recomputed forward, and in backward, which draws the same mask again
// instead of keeping it. The input's dimension 0 must be the micro-batch's
// samples, as activations between layers are. Under tensor parallelism a
// replicated activation drops the same elements on every rank of the group;
// on a split activation each rank draws for its own part as if it were the
// whole (the split is not known here), which one process would not: drop
// replicated activations (after a row-parallel layer, as EncoderBlock does).
#pragma once

#include "ht/nn/module.h"

namespace ht::nn {

class Dropout : public Module {
 public:
  /// Throws kConfig unless 0 <= p < 1.
  Dropout(std::string name, float p);
  float p() const { return p_; }

 protected:
  Tensor forward_impl(Context& ctx, const Tensor& x) override;
  Tensor backward_impl(Context& ctx, const Tensor& dy) override;

 private:
  float p_;
};

}  // namespace ht::nn
