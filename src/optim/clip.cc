// Global gradient norm and clipping coefficient.
#include "ht/optim/clip.h"

#include <algorithm>
#include <cmath>

#include "ht/ops/cast.h"

namespace ht::optim {

float global_grad_norm(const std::vector<Tensor>& grads, const std::function<void(Tensor&)>& reduce) {
  const Device device = grads.empty() ? Device::cpu() : grads.front().device();
  Tensor acc = Tensor::zeros({1}, DType::kF32, device, MemCategory::kOther);
  for (const Tensor& g : grads)
    if (g.defined()) ops::sum_squares(g, acc);
  if (reduce) reduce(acc);
  return std::sqrt(acc.item(0));
}

float clip_coefficient(float norm, float max_norm) {
  if (max_norm <= 0.f || !std::isfinite(norm)) return 1.f;
  return std::min(1.f, max_norm / (norm + 1e-6f));
}

}  // namespace ht::optim
