// Fused optimizer updates: validation and dispatch.
#include "ht/ops/optimizer_update.h"

#include "ops/backend_ops.h"
#include "ops/check.h"

namespace ht::ops {

void adamw_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWHyper& h) {
  const char* op = "adamw_update";
  const Device dev =
      detail::check_same_device(op, {{"param", &param}, {"grad", &grad}, {"exp_avg", &m}, {"exp_avg_sq", &v}});
  detail::check_dtype(op, "param", param, DType::kF32);
  detail::check_dtype(op, "exp_avg", m, DType::kF32);
  detail::check_dtype(op, "exp_avg_sq", v, DType::kF32);
  detail::check_float_dtype(op, "grad", grad);
  for (const Tensor* t : std::initializer_list<const Tensor*>{&grad, &m, &v}) detail::check_numel(op, "state", *t, param.numel());
  HT_CHECK_ARG(h.step >= 1, "{}: step must be >= 1 (1-based, for bias correction), got {}", op, h.step);
  HT_CHECK_ARG(h.beta1 >= 0.f && h.beta1 < 1.f && h.beta2 >= 0.f && h.beta2 < 1.f,
               "{}: betas must lie in [0, 1), got ({}, {})", op, h.beta1, h.beta2);
  HT_DISPATCH(dev, adamw_update, param, grad, m, v, h);
}

void sgd_update(Tensor& param, const Tensor& grad, Tensor& momentum_buf, const SgdHyper& h) {
  const char* op = "sgd_update";
  const Device dev = h.momentum != 0.f
                         ? detail::check_same_device(op, {{"param", &param}, {"grad", &grad}, {"momentum_buf", &momentum_buf}})
                         : detail::check_same_device(op, {{"param", &param}, {"grad", &grad}});
  detail::check_dtype(op, "param", param, DType::kF32);
  detail::check_float_dtype(op, "grad", grad);
  detail::check_numel(op, "grad", grad, param.numel());
  if (h.momentum != 0.f) {
    detail::check_dtype(op, "momentum_buf", momentum_buf, DType::kF32);
    detail::check_numel(op, "momentum_buf", momentum_buf, param.numel());
  }
  HT_DISPATCH(dev, sgd_update, param, grad, momentum_buf, h);
}

}  // namespace ht::ops
