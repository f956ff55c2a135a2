// ht::nn::RMSNorm over the last dimension, with a gain and no bias (Llama's
// normalisation); the gain starts at ones.
#pragma once

#include "ht/nn/module.h"

namespace ht::nn {

class RMSNorm : public Module {
 public:
  RMSNorm(std::string name, std::int64_t dim, Device device, float eps = 1e-5f);

  Parameter& weight() { return *weight_; }

 protected:
  /// x (..., dim) -> (..., dim); saves x and the per-row statistic.
  Tensor forward_impl(Context& ctx, const Tensor& x) override;
  Tensor backward_impl(Context& ctx, const Tensor& dy) override;

 private:
  float eps_;
  Parameter* weight_;
};

}  // namespace ht::nn
