// Global gradient norm and clipping coefficient.
#include "ht/optim/clip.h"

#include <algorithm>
#include <cmath>

#include "ht/ops/cast.h"

namespace ht::optim {

namespace {

float norm_on(Device device, const std::vector<Tensor>& grads, const std::function<void(Tensor&)>& reduce) {
  Tensor acc = Tensor::zeros({1}, DType::kF32, device, MemCategory::kOther);
  for (const Tensor& g : grads)
    if (g.defined()) ops::sum_squares(g, acc);
  if (reduce) reduce(acc);
  return std::sqrt(acc.item(0));
}

}  // namespace

float global_grad_norm(const std::vector<Tensor>& grads, const std::function<void(Tensor&)>& reduce) {
  return norm_on(grads.empty() ? Device::cpu() : grads.front().device(), grads, reduce);
}

float unscale_and_global_norm(std::vector<Tensor> grads, const std::vector<Tensor>& counted, float loss_scale,
                              Device device, const std::function<void(Tensor&)>& reduce) {
  // The flag lives with the gradients; with none to scale it stays 0.
  Tensor found = Tensor::zeros({1}, DType::kF32, grads.empty() ? device : grads.front().device(),
                               MemCategory::kOther);
  if (loss_scale != 1.f)
    for (Tensor& g : grads) ops::scale_and_check_finite(g, 1.f / loss_scale, found);
  const bool nonfinite_here = found.item(0) != 0.f;
  return norm_on(device, counted, [&](Tensor& sum) {
    if (nonfinite_here) sum.fill_(INFINITY);
    if (reduce) reduce(sum);
  });
}

float clip_coefficient(float norm, float max_norm) {
  if (max_norm <= 0.f || !std::isfinite(norm)) return 1.f;
  return std::min(1.f, max_norm / (norm + 1e-6f));
}

}  // namespace ht::optim
