// CUDA drivers of the fused optimizer updates. Hyper-parameters are digested
// on the host exactly as the CPU driver does, so both run the same per-element
// arithmetic.
#include <cmath>

#include "core/cuda_check.h"
#include "core/cuda_context.h"
#include "launch.h"
#include "ops/backend_ops.h"
#include "ops/optimizer_coeffs.h"

namespace ht::ops::cuda {

void adamw_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWHyper& h) {
  const kern::AdamWCoeffs c = detail::adamw_coeffs(h);
  const ht::cuda::DeviceGuard guard(param.device());
  HT_CUDA_CHECK(ht::cuda::launch_adamw_update(param.data<float>(), grad.dtype(), grad.data_ptr(), m.data<float>(),
                                              v.data<float>(), param.numel(), c, ht::cuda::current_stream()));
}

void sgd_update(Tensor& param, const Tensor& grad, Tensor& buf, const SgdHyper& h) {
  const kern::SgdCoeffs c = detail::sgd_coeffs(h);
  const ht::cuda::DeviceGuard guard(param.device());
  float* pb = h.momentum != 0.f ? buf.data<float>() : nullptr;
  HT_CUDA_CHECK(ht::cuda::launch_sgd_update(param.data<float>(), grad.dtype(), grad.data_ptr(), pb, param.numel(), c,
                                            ht::cuda::current_stream()));
}

}  // namespace ht::ops::cuda
