// CUDA drivers of masked mean pooling: tensors to pointers, the backward's
// scratch of per-row counts, on the current stream of the tensors' device.
#include "core/cuda_check.h"
#include "core/cuda_context.h"
#include "launch.h"
#include "ops/backend_ops.h"

namespace ht::ops::cuda {

void masked_mean(const Tensor& x, const Tensor& mask, Tensor& out) {
  const ht::cuda::DeviceGuard guard(out.device());
  HT_CUDA_CHECK(ht::cuda::launch_masked_mean(x.data<float>(), mask.data<std::int32_t>(), out.data<float>(), x.size(0),
                                             x.size(1), x.size(2), ht::cuda::current_stream()));
}

void masked_mean_backward(const Tensor& dout, const Tensor& mask, Tensor& dx) {
  const ht::cuda::DeviceGuard guard(dx.device());
  Tensor counts = Tensor::empty({dx.size(0)}, DType::kI32, dx.device(), MemCategory::kOther);
  HT_CUDA_CHECK(ht::cuda::launch_masked_mean_backward(dout.data<float>(), mask.data<std::int32_t>(), dx.data<float>(),
                                                      dx.size(0), dx.size(1), dx.size(2),
                                                      counts.data<std::int32_t>(), ht::cuda::current_stream()));
  // `counts` is freed here, in stream order after the kernels (ht/core/allocator.h).
}

}  // namespace ht::ops::cuda
