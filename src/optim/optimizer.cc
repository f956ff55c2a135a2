// Slots from parameters.
#include "ht/optim/optimizer.h"

namespace ht::optim {

std::vector<Slot> slots_of(const std::vector<nn::Parameter*>& params) {
  std::vector<Slot> slots;
  slots.reserve(params.size());
  for (nn::Parameter* p : params) {
    p->allocate_grad();
    slots.push_back({.name = p->name(), .param = p->data(), .grad = p->grad(), .weight_decay = p->weight_decay(),
                     .source = p, .offset = 0, .primary = true});
  }
  return slots;
}

std::vector<std::pair<std::string, Tensor>> Optimizer::state() {
  std::vector<std::pair<std::string, Tensor>> out;
  for (std::size_t i = 0; i < slots_.size(); ++i)
    for (auto& [kind, t] : slot_state(i)) out.emplace_back(slots_[i].name + "." + kind, t);
  return out;
}

}  // namespace ht::optim
