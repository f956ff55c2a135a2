// CUDA drivers of softmax and log-softmax: tensors to pointers, on the
// current stream of the tensors' device.
#include "core/cuda_check.h"
#include "core/cuda_context.h"
#include "launch.h"
#include "ops/backend_ops.h"

namespace ht::ops::cuda {

void softmax_forward(const Tensor& x, Tensor& y, bool log) {
  const ht::cuda::DeviceGuard guard(y.device());
  const std::int64_t v = x.size(-1), rows = v ? x.numel() / v : 0;
  HT_CUDA_CHECK(
      ht::cuda::launch_softmax_forward(x.data<float>(), y.data<float>(), rows, v, log, ht::cuda::current_stream()));
}

void softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx, bool log) {
  const ht::cuda::DeviceGuard guard(dx.device());
  const std::int64_t v = y.size(-1), rows = v ? y.numel() / v : 0;
  HT_CUDA_CHECK(ht::cuda::launch_softmax_backward(y.data<float>(), dy.data<float>(), dx.data<float>(), rows, v, log,
                                                  ht::cuda::current_stream()));
}

}  // namespace ht::ops::cuda
