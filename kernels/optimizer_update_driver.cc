// CUDA drivers of the fused optimizer updates. Hyper-parameters are digested
// on the host exactly as the CPU driver does, so both run the same per-element
// arithmetic.
#include <cmath>

#include "core/cuda_check.h"
#include "cuda_context.h"
#include "launch.h"
#include "ops/backend_ops.h"

namespace ht::ops::cuda {

void adamw_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWHyper& h) {
  const kern::AdamWCoeffs c{h.lr,
                            h.beta1,
                            h.beta2,
                            h.eps,
                            h.weight_decay,
                            h.grad_scale,
                            float(1.0 - std::pow(double(h.beta1), double(h.step))),
                            float(std::sqrt(1.0 - std::pow(double(h.beta2), double(h.step))))};
  const ht::cuda::DeviceGuard guard(param.device());
  HT_CUDA_CHECK(ht::cuda::launch_adamw_update(param.data<float>(), grad.dtype(), grad.data_ptr(), m.data<float>(),
                                              v.data<float>(), param.numel(), c, ht::cuda::current_stream()));
}

void sgd_update(Tensor& param, const Tensor& grad, Tensor& buf, const SgdHyper& h) {
  const kern::SgdCoeffs c{h.lr, h.momentum, h.weight_decay, h.grad_scale, h.nesterov, h.first_step};
  const ht::cuda::DeviceGuard guard(param.device());
  float* pb = h.momentum != 0.f ? buf.data<float>() : nullptr;
  HT_CUDA_CHECK(ht::cuda::launch_sgd_update(param.data<float>(), grad.dtype(), grad.data_ptr(), pb, param.numel(), c,
                                            ht::cuda::current_stream()));
}

}  // namespace ht::ops::cuda
