// Host fused AdamW and SGD updates over the shared per-element bodies.
#include <cmath>

#include "cast.cuh"
#include "ops/backend_ops.h"
#include "optimizer_update.cuh"

namespace ht::ops::cpu {
namespace {

template <typename Fn>
void visit_grad(const Tensor& g, Fn&& fn) {
  switch (g.dtype()) {
    case DType::kF32: fn(static_cast<const float*>(g.data_ptr())); break;
    case DType::kF16: fn(static_cast<const f16*>(g.data_ptr())); break;
    case DType::kBF16: fn(static_cast<const bf16*>(g.data_ptr())); break;
    case DType::kI32: break;
  }
}

}  // namespace

void adamw_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWHyper& h) {
  const kern::AdamWCoeffs c{h.lr,
                            h.beta1,
                            h.beta2,
                            h.eps,
                            h.weight_decay,
                            h.grad_scale,
                            float(1.0 - std::pow(double(h.beta1), double(h.step))),
                            float(std::sqrt(1.0 - std::pow(double(h.beta2), double(h.step))))};
  float* pp = param.data<float>();
  float* pm = m.data<float>();
  float* pv = v.data<float>();
  const std::int64_t n = param.numel();
  visit_grad(grad, [&](const auto* pg) {
#pragma omp parallel for simd schedule(static)
    for (std::int64_t i = 0; i < n; ++i) kern::adamw_element(pp[i], kern::load(pg, i), pm[i], pv[i], c);
  });
}

void sgd_update(Tensor& param, const Tensor& grad, Tensor& buf, const SgdHyper& h) {
  const kern::SgdCoeffs c{h.lr, h.momentum, h.weight_decay, h.grad_scale, h.nesterov, h.first_step};
  float* pp = param.data<float>();
  float* pb = h.momentum != 0.f ? buf.data<float>() : nullptr;
  const std::int64_t n = param.numel();
  visit_grad(grad, [&](const auto* pg) {
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < n; ++i) kern::sgd_element(pp[i], kern::load(pg, i), pb ? pb + i : nullptr, c);
  });
}

}  // namespace ht::ops::cpu
