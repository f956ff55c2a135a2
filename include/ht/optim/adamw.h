// ht::optim::AdamW: Adam with decoupled weight decay (torch.optim.AdamW),
// fused into one pass per slot. No decay on slots with weight_decay false
// (biases, LayerNorm gains).
#pragma once

#include "ht/optim/optimizer.h"

namespace ht::optim {

struct AdamWOptions {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;
};

class AdamW : public Optimizer {
 public:
  /// Allocates zeroed exp_avg and exp_avg_sq per slot (kOptimizerState).
  AdamW(std::vector<Slot> slots, const AdamWOptions& options);

  void step(float lr, float grad_scale = 1.f) override;
  std::string name() const override { return "adamw"; }
  std::vector<std::pair<std::string, Tensor>> slot_state(std::size_t i) override;
  const AdamWOptions& options() const { return options_; }

 private:
  AdamWOptions options_;
  std::vector<Tensor> exp_avg_, exp_avg_sq_;
};

}  // namespace ht::optim
