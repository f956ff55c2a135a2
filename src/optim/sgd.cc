// ht::optim::SGD.
#include "ht/optim/sgd.h"

#include "ht/ops/optimizer_update.h"

namespace ht::optim {

SGD::SGD(std::vector<Slot> slots, const SgdOptions& options) : Optimizer(std::move(slots)), options_(options) {
  if (options_.momentum != 0.f)
    for (const Slot& s : slots_)
      momentum_.push_back(Tensor::zeros(s.param.shape(), DType::kF32, s.param.device(), MemCategory::kOptimizerState));
}

void SGD::step(float lr, float grad_scale) {
  ++step_count_;
  Tensor none;
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
    const ops::SgdHyper h{.lr = lr,
                          .momentum = options_.momentum,
                          .weight_decay = s.weight_decay ? options_.weight_decay : 0.f,
                          .nesterov = options_.nesterov,
                          .first_step = step_count_ == 1,
                          .grad_scale = grad_scale};
    ops::sgd_update(s.param, s.grad, momentum_.empty() ? none : momentum_[i], h);
  }
}

std::vector<std::pair<std::string, Tensor>> SGD::slot_state(std::size_t i) {
  if (momentum_.empty()) return {};
  return {{"momentum", momentum_.at(i)}};
}

}  // namespace ht::optim
