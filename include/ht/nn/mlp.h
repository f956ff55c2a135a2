// ht::nn::MLP: GPT-2's feed-forward block, c_fc (C -> 4C), GELU, c_proj (4C -> C).
#pragma once

#include "ht/nn/linear.h"

namespace ht::nn {

class MLP : public Module {
 public:
  /// With tensor parallelism c_fc is column- and c_proj row-parallel.
  MLP(std::string name, std::int64_t dim, std::int64_t hidden, Device device, TensorParallel tp = {});

  Linear& c_fc() { return *c_fc_; }
  Linear& c_proj() { return *c_proj_; }

 protected:
  Tensor forward_impl(Context& ctx, const Tensor& x) override;
  Tensor backward_impl(Context& ctx, const Tensor& dy) override;

 private:
  Linear* c_fc_;
  Linear* c_proj_;
};

}  // namespace ht::nn
