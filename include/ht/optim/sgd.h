// ht::optim::SGD with momentum (torch.optim.SGD, dampening 0).
#pragma once

#include "ht/optim/optimizer.h"

namespace ht::optim {

struct SgdOptions {
  float momentum = 0.9f;
  float weight_decay = 0.f;
  bool nesterov = false;
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<Slot> slots, const SgdOptions& options);

  void step(float lr, float grad_scale = 1.f) override;
  std::string name() const override { return "sgd"; }
  /// {("momentum", buffer)}, or nothing without momentum.
  std::vector<std::pair<std::string, Tensor>> slot_state(std::size_t i) override;

 private:
  SgdOptions options_;
  std::vector<Tensor> momentum_;
};

}  // namespace ht::optim
