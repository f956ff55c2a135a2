// ht::optim::AdamW.
#include "ht/optim/adamw.h"

#include "ht/ops/optimizer_update.h"

namespace ht::optim {

AdamW::AdamW(std::vector<Slot> slots, const AdamWOptions& options) : Optimizer(std::move(slots)), options_(options) {
  for (const Slot& s : slots_) {
    exp_avg_.push_back(Tensor::zeros(s.param.shape(), DType::kF32, s.param.device(), MemCategory::kOptimizerState));
    exp_avg_sq_.push_back(Tensor::zeros(s.param.shape(), DType::kF32, s.param.device(), MemCategory::kOptimizerState));
  }
}

void AdamW::step(float lr, float grad_scale) {
  ++step_count_;
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
    const ops::AdamWHyper h{.lr = lr,
                            .beta1 = options_.beta1,
                            .beta2 = options_.beta2,
                            .eps = options_.eps,
                            .weight_decay = s.weight_decay ? options_.weight_decay : 0.f,
                            .step = step_count_,
                            .grad_scale = grad_scale};
    ops::adamw_update(s.param, s.grad, exp_avg_[i], exp_avg_sq_[i], h);
  }
}

std::vector<std::pair<std::string, Tensor>> AdamW::slot_state(std::size_t i) {
  return {{"exp_avg", exp_avg_.at(i)}, {"exp_avg_sq", exp_avg_sq_.at(i)}};
}

}  // namespace ht::optim
