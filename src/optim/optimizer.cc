// Slots from parameters.
#include "ht/optim/optimizer.h"

namespace ht::optim {

std::vector<Slot> slots_of(const std::vector<nn::Parameter*>& params) {
  std::vector<Slot> slots;
  slots.reserve(params.size());
  for (nn::Parameter* p : params) {
    p->allocate_grad();
    slots.push_back({p->name(), p->data(), p->grad(), p->weight_decay()});
  }
  return slots;
}

}  // namespace ht::optim
