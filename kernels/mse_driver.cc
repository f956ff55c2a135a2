// CUDA mean-squared-error driver: the double scratch of the forward's
// partial sums, and the backward's coefficient digested on the host.
#include "core/cuda_check.h"
#include "core/cuda_context.h"
#include "launch.h"
#include "ops/backend_ops.h"

namespace ht::ops::cuda {

void mse_forward(const Tensor& pred, const Tensor& target, Tensor& loss) {
  const std::int64_t n = pred.numel();
  const ht::cuda::DeviceGuard guard(pred.device());
  // Tensors have no f64 dtype: the scratch is an f32 tensor of twice the
  // count, which the device allocator's alignment (fit for any type) makes a
  // valid double array.
  const std::int64_t partials = ht::cuda::mse_scratch_count(n);
  Tensor scratch = Tensor::empty({2 * partials}, DType::kF32, pred.device(), MemCategory::kActivations);
  HT_CUDA_CHECK(ht::cuda::launch_mse_forward(pred.data<float>(), target.data<float>(), n,
                                             static_cast<double*>(scratch.data_ptr()), loss.data<float>(),
                                             ht::cuda::current_stream()));
  // `scratch` is freed here, in stream order after the kernels (ht/core/allocator.h).
}

void mse_backward(const Tensor& pred, const Tensor& target, float dloss, Tensor& dpred) {
  const std::int64_t n = pred.numel();
  const ht::cuda::DeviceGuard guard(pred.device());
  const float coef = float(2.0 * double(dloss) / double(n));  // as the CPU driver digests it
  HT_CUDA_CHECK(ht::cuda::launch_mse_backward(pred.data<float>(), target.data<float>(), coef, dpred.data<float>(), n,
                                              ht::cuda::current_stream()));
}

}  // namespace ht::ops::cuda
