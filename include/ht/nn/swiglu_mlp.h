// ht::nn::SwiGLUMLP: Llama's feed-forward block,
//   down(silu(gate(x)) * up(x)),
// with the gate and up projections packed into one Linear ("gate_up", out
// features [gate | up], no bias) and "down" (no bias).
//
// Tensor parallelism: gate_up is column-parallel with two parts, so each rank
// holds hidden / tp rows of the gate and of the up projection ([gate_r |
// up_r]), and down is row-parallel: one sum in each direction.
#pragma once

#include "ht/nn/linear.h"

namespace ht::nn {

class SwiGLUMLP : public Module {
 public:
  /// Throws kConfig unless tp divides `hidden`.
  SwiGLUMLP(std::string name, std::int64_t dim, std::int64_t hidden, Device device, TensorParallel tp = {});

  Linear& gate_up() { return *gate_up_; }
  Linear& down() { return *down_; }

 protected:
  /// x (..., dim) -> (..., dim); saves the gate/up activations.
  Tensor forward_impl(Context& ctx, const Tensor& x) override;
  Tensor backward_impl(Context& ctx, const Tensor& dy) override;

 private:
  Linear* gate_up_;
  Linear* down_;
};

}  // namespace ht::nn
