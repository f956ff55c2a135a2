// CUDA RoPE driver: tensors to pointers, on the current stream of the tensors' device.
#include "core/cuda_check.h"
#include "core/cuda_context.h"
#include "launch.h"
#include "ops/backend_ops.h"

namespace ht::ops::cuda {

void rope(const Tensor& x, const Tensor& table, int n_head, bool inverse, Tensor& y) {
  const ht::cuda::DeviceGuard guard(x.device());
  const std::int64_t t = x.size(1), d = x.size(2) / n_head;
  HT_CUDA_CHECK(ht::cuda::launch_rope(x.data<float>(), table.data<float>(), y.data<float>(), x.size(0) * t, t, n_head,
                                      d / 2, inverse, ht::cuda::current_stream()));
}

}  // namespace ht::ops::cuda
