// ht::nn::Linear: y = x W^T + b, W of shape (out, in) as in PyTorch.
#pragma once

#include "ht/nn/module.h"

namespace ht::nn {

class Linear : public Module {
 public:
  Linear(std::string name, std::int64_t in_features, std::int64_t out_features, bool bias, Device device);

  Parameter& weight() { return *weight_; }
  Parameter* bias() { return bias_; }
  std::int64_t in_features() const { return in_; }
  std::int64_t out_features() const { return out_; }

 protected:
  /// x (..., in) -> y (..., out); saves x.
  Tensor forward_impl(Context& ctx, const Tensor& x) override;
  /// dW += dy^T x, db += colsum(dy); returns dx = dy W.
  Tensor backward_impl(Context& ctx, const Tensor& dy) override;

 private:
  std::int64_t in_, out_;
  Parameter* weight_;
  Parameter* bias_ = nullptr;
};

}  // namespace ht::nn
