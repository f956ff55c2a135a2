// CUDA drivers of the precision ops: cast, scale_and_check_finite, sum_squares.
#include "core/cuda_check.h"
#include "core/cuda_context.h"
#include "launch.h"
#include "ops/backend_ops.h"

namespace ht::ops::cuda {

void cast(const Tensor& src, Tensor& dst) {
  const ht::cuda::DeviceGuard guard(dst.device());
  HT_CUDA_CHECK(ht::cuda::launch_cast(src.dtype(), src.data_ptr(), dst.dtype(), dst.data_ptr(), src.numel(),
                                      ht::cuda::current_stream()));
}

void scale_and_check_finite(Tensor& x, float scale, Tensor& found) {
  const ht::cuda::DeviceGuard guard(x.device());
  HT_CUDA_CHECK(ht::cuda::launch_scale_and_check_finite(x.dtype(), x.data_ptr(), x.numel(), scale,
                                                        found.data<float>(), ht::cuda::current_stream()));
}

void sum_squares(const Tensor& x, Tensor& acc) {
  const std::int64_t n = x.numel();
  if (n == 0) return;
  const ht::cuda::DeviceGuard guard(x.device());
  // Per-block partial sums in double. Tensors have no f64 dtype, so the
  // scratch is an f32 tensor of twice the count; the device allocator's
  // alignment (fit for any type) makes it a valid double array.
  const std::int64_t partials = ht::cuda::sum_squares_scratch_count(n);
  Tensor scratch = Tensor::empty({2 * partials}, DType::kF32, x.device(), MemCategory::kActivations);
  HT_CUDA_CHECK(ht::cuda::launch_sum_squares(x.dtype(), x.data_ptr(), n, static_cast<double*>(scratch.data_ptr()),
                                             acc.data<float>(), ht::cuda::current_stream()));
  // `scratch` is freed here, in stream order after the kernels (ht/core/allocator.h).
}

}  // namespace ht::ops::cuda
