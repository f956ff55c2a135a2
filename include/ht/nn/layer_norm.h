// ht::nn::LayerNorm over the last dimension, with gain and bias.
#pragma once

#include "ht/nn/module.h"

namespace ht::nn {

class LayerNorm : public Module {
 public:
  LayerNorm(std::string name, std::int64_t dim, Device device, float eps = 1e-5f);

  Parameter& weight() { return *weight_; }
  Parameter& bias() { return *bias_; }

 protected:
  Tensor forward_impl(Context& ctx, const Tensor& x) override;
  Tensor backward_impl(Context& ctx, const Tensor& dy) override;

 private:
  float eps_;
  Parameter* weight_;
  Parameter* bias_;
};

}  // namespace ht::nn
