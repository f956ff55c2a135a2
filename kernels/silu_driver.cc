// CUDA drivers of SiLU and SwiGLU: tensors to pointers, on the current stream
// of the tensors' device.
#include "core/cuda_check.h"
#include "core/cuda_context.h"
#include "launch.h"
#include "ops/backend_ops.h"

namespace ht::ops::cuda {

using ht::cuda::current_stream;
using ht::cuda::DeviceGuard;

void silu_forward(const Tensor& x, Tensor& y) {
  const DeviceGuard guard(y.device());
  HT_CUDA_CHECK(ht::cuda::launch_silu_forward(x.data<float>(), y.data<float>(), x.numel(), current_stream()));
}

void silu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) {
  const DeviceGuard guard(dx.device());
  HT_CUDA_CHECK(ht::cuda::launch_silu_backward(x.data<float>(), dy.data<float>(), dx.data<float>(), x.numel(),
                                               current_stream()));
}

void swiglu_forward(const Tensor& gate_up, Tensor& out) {
  const DeviceGuard guard(out.device());
  const std::int64_t f = out.size(-1), rows = f ? out.numel() / f : 0;
  HT_CUDA_CHECK(ht::cuda::launch_swiglu_forward(gate_up.data<float>(), out.data<float>(), rows, f, current_stream()));
}

void swiglu_backward(const Tensor& dout, const Tensor& gate_up, Tensor& dgate_up) {
  const DeviceGuard guard(dgate_up.device());
  const std::int64_t f = dout.size(-1), rows = f ? dout.numel() / f : 0;
  HT_CUDA_CHECK(ht::cuda::launch_swiglu_backward(dout.data<float>(), gate_up.data<float>(), dgate_up.data<float>(),
                                                 rows, f, current_stream()));
}

}  // namespace ht::ops::cuda
